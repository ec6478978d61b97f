//! The audit log: one JSON object per line, one line per decision, written before a byte is forwarded, and a
//! second line with the same `id` when an allowed request ends. Each line is one `write` on an `O_APPEND` file, so
//! a crash leaves only whole lines; a failed write is reported to the caller, who refuses the request. Before each
//! line the open file is checked to still have a name (a log deleted would lose every line written to it), and every
//! half second that its path still names it (a log moved away keeps its lines): either way the log is created again
//! at its path, and where that fails the write fails, so no line goes unseen into an unlinked file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use leash_policy::{Decision, Reason, Verdict};
use serde::Serialize;

/// Where the lines go.
enum Sink {
    File {
        file: File,
        path: PathBuf,
        /// Device and inode of `file`: the path names the open file only while a `stat` of it gives these.
        id: (u64, u64),
        /// When the path was last checked against `id` (see [`follow_path`]).
        path_checked: Instant,
        /// Lines were written since the last `sync_data`. A sync with nothing to write still flushes the disk's
        /// cache (a quarter of a millisecond here, at the end of every `leash run --log` that made no request).
        unsynced: bool,
    },
    Stdout,
    /// Standard error (`leash proxy`'s and `leash docker attach`'s, which no sandboxed process shares).
    Stderr,
    /// An unnamed file that [`AuditLog::replay_deferred`] copies to standard error once the sandbox has ended
    /// (`leash run` without `--log`, whose standard error the command shares: lines written there as they come
    /// could be forged, interleaved or read away by the command).
    Deferred(File),
    /// Tests that do not read the log.
    Discard,
}

/// The run's audit log. Cheap to share; writes are serialised so lines never interleave.
pub struct AuditLog {
    sink: Mutex<Sink>,
    next_id: AtomicU64,
    /// The container the run serves (`leash docker`), added to every line as `container`.
    container: Option<Box<str>>,
}

/// The decision record of one request or tunnel.
#[derive(Debug, Serialize)]
pub struct DecisionEntry<'a> {
    pub id: u64,
    pub time: String,
    pub method: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub path: Option<&'a str>,
    pub decision: &'static str,
    pub rule: Option<&'a str>,
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// What was removed from a model API request (`provider-tools-stripped`), one item per provider-side tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stripped: Option<&'a [String]>,
}

/// The outcome record of an allowed request, joined to its decision by `id`: `status` is the upstream's (leash's
/// own 502 or 504 when the upstream failed, even mid-response), `bytes_up` and `bytes_down` what was relayed each
/// way. A client that hangs up mid-response is no failure: its outcome has the upstream's status and the bytes
/// relayed until it went away (over HTTP/1.1 as over HTTP/2). `error` says why the upstream failed, when it did.
#[derive(Debug, Serialize)]
pub struct OutcomeEntry {
    pub id: u64,
    pub time: String,
    pub status: u16,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: f64,
    /// `cannot-resolve`, `refused`, `reset`, `timed-out`, `cannot-connect`, `bad-response`, `closed`: an upstream
    /// failure's cause (see [`UpstreamFailure`]); absent when the upstream answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
}

/// Why an allowed request's upstream failed, as the outcome's `error` word says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// The name did not resolve.
    CannotResolve,
    /// The upstream refused the connection.
    Refused,
    /// The upstream reset the connection.
    Reset,
    /// No connection, or no response, in time.
    TimedOut,
    /// Any other failure to connect (unreachable, ...).
    CannotConnect,
    /// The upstream's response could not be read.
    BadResponse,
    /// The upstream closed (or reset) the connection before any byte of an answer.
    Closed,
}

impl UpstreamFailure {
    /// The audit log's word.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFailure::CannotResolve => "cannot-resolve",
            UpstreamFailure::Refused => "refused",
            UpstreamFailure::Reset => "reset",
            UpstreamFailure::TimedOut => "timed-out",
            UpstreamFailure::CannotConnect => "cannot-connect",
            UpstreamFailure::BadResponse => "bad-response",
            UpstreamFailure::Closed => "closed",
        }
    }

    /// The cause of a failed connection or transfer.
    pub fn of_io(e: &io::Error) -> UpstreamFailure {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => UpstreamFailure::Refused,
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe => {
                UpstreamFailure::Reset
            }
            io::ErrorKind::TimedOut => UpstreamFailure::TimedOut,
            io::ErrorKind::UnexpectedEof => UpstreamFailure::Closed,
            _ => UpstreamFailure::CannotConnect,
        }
    }
}

/// The audit log could not be written; the request it was for must be refused.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the audit log {where_}: {source}")]
pub struct AuditError {
    where_: String,
    source: io::Error,
}

impl AuditLog {
    /// Create (mode 0600) or append to the log file. Failing here means leash does not start.
    pub fn open(path: &Path) -> io::Result<Self> {
        let (file, id) = open_file(path)?;
        let path = path.to_owned();
        Ok(Self::with_sink(Sink::File { file, path, id, path_checked: Instant::now(), unsynced: false }))
    }

    /// Open the log file's path again and write there from now on (after logrotate moved the file). The old file is
    /// closed only once the new one is open: if opening fails, lines keep going to the old file and the error says
    /// why. Logs that are not files have nothing to reopen.
    pub fn reopen(&self) -> Result<(), AuditError> {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Sink::File { file, path, id, unsynced, .. } = &mut *sink {
            let (fresh, fresh_id) = open_file(path).map_err(|e| err(path, e))?;
            if *unsynced {
                let _ = file.sync_data();
            }
            (*file, *id, *unsynced) = (fresh, fresh_id, false);
        }
        Ok(())
    }

    /// JSON lines on standard output.
    pub fn stdout() -> Self {
        Self::with_sink(Sink::Stdout)
    }

    /// JSON lines on standard error.
    pub fn stderr() -> Self {
        Self::with_sink(Sink::Stderr)
    }

    /// A log that keeps nothing (for tests that do not read it).
    pub fn discard() -> Self {
        Self::with_sink(Sink::Discard)
    }

    /// Lines kept in an unnamed file in `dir` (nothing else can open it), for [`AuditLog::replay_deferred`].
    pub fn deferred(dir: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(dir)?;
        Ok(Self::with_sink(Sink::Deferred(file)))
    }

    /// Copies every line kept by a [`AuditLog::deferred`] log to `out`, in order; nothing for another sink. Later
    /// lines are kept too, for another replay.
    pub fn replay_deferred(&self, out: &mut dyn Write) -> io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        let Sink::Deferred(file) = &mut *sink else { return Ok(()) };
        let end = file.stream_position()?;
        file.seek(SeekFrom::Start(0))?;
        let copied = io::copy(&mut Read::by_ref(file).take(end), out);
        file.seek(SeekFrom::Start(end))?;
        copied.map(drop)
    }

    fn with_sink(sink: Sink) -> Self {
        Self { sink: Mutex::new(sink), next_id: AtomicU64::new(1), container: None }
    }

    /// Every line written from now on carries `"container": id` (the Docker container this run serves).
    pub fn with_container(mut self, id: &str) -> Self {
        self.container = Some(id.into());
        self
    }

    /// A fresh request id, unique in this run.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn decision(&self, entry: &DecisionEntry<'_>) -> Result<(), AuditError> {
        self.write_line(entry)
    }

    pub fn outcome(&self, entry: &OutcomeEntry) -> Result<(), AuditError> {
        self.write_line(entry)
    }

    /// Flush buffered output (standard output is line-buffered by us; files are unbuffered, and their lines are
    /// synced to the disk here, if any was written since the last sync).
    pub fn flush(&self) -> Result<(), AuditError> {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *sink {
            Sink::File { unsynced: false, .. } => Ok(()),
            Sink::File { file, path, unsynced, .. } => {
                file.sync_data().map_err(|e| err(path, e))?;
                *unsynced = false;
                Ok(())
            }
            Sink::Stdout => io::stdout().flush().map_err(|e| err(Path::new("<stdout>"), e)),
            Sink::Stderr | Sink::Deferred(_) | Sink::Discard => Ok(()),
        }
    }

    fn write_line<T: Serialize>(&self, entry: &T) -> Result<(), AuditError> {
        let json = match &self.container {
            None => serde_json::to_vec(entry),
            Some(container) => serde_json::to_vec(&InContainer { entry, container }),
        };
        let mut line = json.map_err(|e| err(Path::new("<json>"), e.into()))?;
        line.push(b'\n');
        // A poisoned lock only means another writer panicked mid-call; the file itself is still fine to append to.
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        match &mut *sink {
            // One write_all of a whole line: with O_APPEND a crash can cut only the line being written.
            Sink::File { file, path, id, path_checked, unsynced } => {
                follow_path(file, path, id, path_checked)?;
                file.write_all(&line).map_err(|e| err(path, e))?;
                *unsynced = true;
                Ok(())
            }
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(&line).and_then(|()| out.flush()).map_err(|e| err(Path::new("<stdout>"), e))
            }
            Sink::Stderr => io::stderr().lock().write_all(&line).map_err(|e| err(Path::new("<stderr>"), e)),
            Sink::Deferred(file) => file.write_all(&line).map_err(|e| err(Path::new("<deferred>"), e)),
            Sink::Discard => Ok(()),
        }
    }
}

/// An entry with the container it came from appended.
#[derive(Serialize)]
struct InContainer<'a, T> {
    #[serde(flatten)]
    entry: &'a T,
    container: &'a str,
}

/// Create (mode 0600) or append to the log file at `path`; with its device and inode.
fn open_file(path: &Path) -> io::Result<(File, (u64, u64))> {
    let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    let meta = file.metadata()?;
    Ok((file, (meta.dev(), meta.ino())))
}

/// How often a line also checks that the log's path still names the open file.
const PATH_CHECK: Duration = Duration::from_millis(500);

/// If the open file is gone or no longer at `path`, open the path again: a file nobody can find must not take the
/// lines. A deleted file (no link left) would lose every line written to it, so each line checks that with an
/// `fstat` (0.4 µs, beside a ~1 µs write). A file moved away (logrotate without a SIGHUP, a renamed directory) still
/// holds its lines where the operator finds them, so the `stat` of the path that notices it (1-2.5 µs: 7 % of a
/// proxied request's CPU when run on every line) runs at most every [`PATH_CHECK`]. (An inotify watch would cost
/// nothing per line but tells a thread, not this write: a line written before the thread wakes would be lost.)
fn follow_path(file: &mut File, path: &Path, id: &mut (u64, u64), checked: &mut Instant) -> Result<(), AuditError> {
    let deleted = file.metadata().map_or(true, |m| m.nlink() == 0);
    if !deleted {
        if checked.elapsed() < PATH_CHECK {
            return Ok(());
        }
        *checked = Instant::now();
        if std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == *id) {
            return Ok(());
        }
    }
    let (fresh, fresh_id) = open_file(path).map_err(|e| err(path, e))?;
    tracing::warn!(
        "the audit log `{}` was deleted or moved away; writing on to a new file at its path",
        path.display()
    );
    (*file, *id, *checked) = (fresh, fresh_id, Instant::now());
    Ok(())
}

fn err(path: &Path, source: io::Error) -> AuditError {
    AuditError { where_: format!("`{}`", path.display()), source }
}

/// The `decision` word of a verdict.
pub fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allow",
        Verdict::Block => "block",
        Verdict::Inspect => "inspect",
        Verdict::WouldBlock => "would-block",
    }
}

/// Convenience for a refusal that never reached the engine (400s, audit failures).
pub fn refusal(reason: Reason) -> Decision {
    Decision { verdict: Verdict::Block, reason, rule: None }
}

/// The current time, RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Format a time as RFC 3339 UTC (`2026-12-02T16:42:13.123Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_229_733_123);
        assert_eq!(rfc3339(t), "2026-12-02T16:42:13.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_container_log_names_the_container_on_every_line() {
        let path = std::env::temp_dir().join(format!("leash-audit-container-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = AuditLog::open(&path).map(|l| l.with_container("c0ffee")).unwrap();
        let outcome = OutcomeEntry {
            id: 1,
            time: now_rfc3339(),
            status: 200,
            bytes_up: 1,
            bytes_down: 2,
            duration_ms: 0.5,
            error: None,
        };
        log.outcome(&outcome).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(text.starts_with("{\"id\":1,") && text.ends_with(",\"container\":\"c0ffee\"}\n"), "{text}");
    }
}
