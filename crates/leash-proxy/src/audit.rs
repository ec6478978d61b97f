//! The audit log: one JSON object per line, one line per decision, written before a byte is forwarded, and a
//! second line with the same `id` when an allowed request ends. Each line is one `write` on an `O_APPEND` file, so
//! a crash leaves only whole lines; a failed write is reported to the caller, who refuses the request. Lines to a
//! file are written without a lock of leash's own: the kernel writes each append whole before the next (a regular
//! file's writes hold its inode lock), while a lock held across the `write` made the other worker sleep and be woken
//! for nearly every line under load (bench/RESULTS.md, "The audit log's lock"). The file is
//! opened once and every line goes through that descriptor for the whole run: a log moved away (logrotate, a renamed
//! directory) keeps every line, and nothing put at its path later (a file, a symlink or a FIFO of someone who can
//! write the directory) ever receives one. Only the operator's [`AuditLog::reopen`] (`leash proxy`'s SIGHUP) opens
//! the path again, and it refuses anything but a regular file. Before each line the open file is checked to still
//! have a name: a deleted log would lose every line written to it, so the write fails instead.
//!
//! It also keeps a tally of the refusals it wrote (by destination and reason, see [`AuditLog::refusals`]), from which
//! `leash run` and `leash docker run` print their end-of-run summary.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, SystemTime};

use leash_policy::{Decision, Reason, RequestKind, Verdict};
use rustix::fs::{statx, AtFlags, StatxFlags};
use serde::Serialize;

mod line;

pub use line::{
    verdict_word, AuditLine, DecisionEntry, LineKind, OutcomeEntry, SwitchEntry, UpstreamFailure, LOOKUP_METHOD,
    SERVICE_METHOD, SWITCH_EVENT, TUNNEL_METHOD,
};

/// Where the lines go.
enum Sink {
    File {
        file: File,
        /// Where `file` was opened: named in errors, and opened again only by [`AuditLog::reopen`].
        path: PathBuf,
        /// Lines were written since the last `sync_data`. A sync with nothing to write still flushes the disk's
        /// cache (a quarter of a millisecond here, at the end of every `leash run --log` that made no request).
        unsynced: AtomicBool,
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

/// The run's audit log. Cheap to share; lines never interleave (see the module's note).
pub struct AuditLog {
    /// Read-locked to write a line to a file (appends run side by side), write-locked for everything else: another
    /// sink's line, a reopen, a replay.
    sink: RwLock<Sink>,
    next_id: AtomicU64,
    /// The container the run serves (`leash docker`), added to every line as `container`.
    container: Option<Box<str>>,
    /// The attachment's labels (`leash attach`), added to every line as `labels`.
    labels: Option<std::collections::BTreeMap<String, String>>,
    /// A containment that enforces nothing (`leash run --advisory`), added to every line as `containment`.
    containment: Option<&'static str>,
    /// The refusals written so far; locked only for a refusal, never for an allowed request.
    refused: Mutex<Tally>,
    /// What went otherwise than the command may think: upstream failures and provider-side tools stripped; locked
    /// only for one of those.
    noticed: Mutex<Noticed>,
}

/// Most destinations [`Noticed`] tells apart for each thing it counts; past them it counts only the total.
const MAX_NOTICED: usize = 64;

/// What a run's summary says besides its refusals: allowed requests whose upstream failed (the command saw only a
/// bare failure: `gnutls_handshake() failed`, a reset), and provider-side tools stripped from model requests (the
/// model's answers change, and nothing in them says why). By destination and what happened, the most frequent first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Noticed {
    /// `(host:port, cause)` → count.
    pub failures: Vec<((String, String), u64)>,
    /// `(host, tool)` → count.
    pub stripped: Vec<((String, String), u64)>,
    /// Counted past `MAX_NOTICED` destinations each, not told apart: failures, then tools stripped.
    pub untold: (u64, u64),
}

impl Noticed {
    fn count(list: &mut Vec<((String, String), u64)>, untold: &mut u64, key: (String, String)) {
        if let Some((_, n)) = list.iter_mut().find(|(k, _)| *k == key) {
            *n = n.saturating_add(1);
        } else if list.len() < MAX_NOTICED {
            list.push((key, 1));
        } else {
            *untold = untold.saturating_add(1);
        }
    }

    /// The counts, the most frequent first (ties in the order first seen).
    fn ranked(&self) -> Noticed {
        let mut ranked = self.clone();
        ranked.failures.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        ranked.stripped.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        ranked
    }
}

/// Most destinations the tally tells apart. A summary a person reads names a few dozen; past this many (a command
/// refused in a loop over made-up names) refusals are only counted, so the tally stays under half a megabyte.
pub const MAX_REFUSED_DESTINATIONS: usize = 1_000;

/// Longest example path kept per destination, in bytes: enough to recognise the request, while a 64 KiB request
/// head cannot make the tally keep 64 KiB for each destination.
const MAX_EXAMPLE_PATH: usize = 200;

/// The refusals an [`AuditLog`] wrote, by destination (see [`AuditLog::refusals`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    /// One per kind of request, host, port, reason and refusal; the most frequent first, ties in the order first
    /// seen.
    pub destinations: Vec<RefusedDestination>,
    /// Refusals to destinations past [`MAX_REFUSED_DESTINATIONS`]: counted, not told apart.
    pub untold: Untold,
}

/// Refusals counted but not told apart, by the decision the log gave them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Untold {
    /// Logged `block`.
    pub refused: u64,
    /// Logged `would-block`.
    pub would_block: u64,
}

/// What the log said of a refusal: `block`, or `would-block` (an audit mode let through what the policy refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `block`: the request was refused.
    Refused,
    /// `would-block`: let through by audit mode.
    WouldBlock,
}

impl Refusals {
    /// Every refusal of one sort counted.
    pub fn total(&self, refusal: Refusal) -> u64 {
        let told = self.destinations.iter().filter(|d| d.refusal == refusal).map(|d| d.count).sum::<u64>();
        let untold = match refusal {
            Refusal::Refused => self.untold.refused,
            Refusal::WouldBlock => self.untold.would_block,
        };
        told.saturating_add(untold)
    }
}

impl Refusal {
    /// The refusal a verdict records; `None` for an allow.
    fn of(verdict: Verdict) -> Option<Refusal> {
        match verdict {
            Verdict::Block => Some(Refusal::Refused),
            Verdict::WouldBlock => Some(Refusal::WouldBlock),
            Verdict::Allow | Verdict::Inspect => None,
        }
    }
}

/// Where refused requests went, why, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedDestination {
    /// Refused, or let through by audit mode.
    pub refusal: Refusal,
    /// A request, a tunnel or a lookup (which port list a hint looks at).
    pub kind: RequestKind,
    /// The host as logged (for a tunnel the SNI when one was read).
    pub host: Box<str>,
    /// The port as logged.
    pub port: u16,
    /// Why they were refused.
    pub reason: Reason,
    /// How many times.
    pub count: u64,
    /// The path of the first such refusal, as logged (cut to `MAX_EXAMPLE_PATH`, 200 bytes); none for tunnels and
    /// lookups.
    pub example_path: Option<Box<str>>,
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
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        Ok(Self::with_sink(Sink::File { file, path: path.to_owned(), unsynced: AtomicBool::new(false) }))
    }

    /// Open the log file's path again and write there from now on (after logrotate moved the file): the operator's
    /// signal, never anything noticed at the path. Only a regular file is taken (see `reopen_file`). The old file is
    /// closed only once the new one is open: if opening fails, lines keep going to the old file and the error says
    /// why. Logs that are not files have nothing to reopen.
    pub fn reopen(&self) -> Result<(), AuditError> {
        let mut sink = self.sink.write().unwrap_or_else(|p| p.into_inner());
        if let Sink::File { file, path, unsynced } = &mut *sink {
            let fresh = reopen_file(path).map_err(|e| err(path, e))?;
            if *unsynced.get_mut() {
                let _ = file.sync_data();
            }
            (*file, *unsynced.get_mut()) = (fresh, false);
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

    /// Lines kept in an unnamed file in `dir` (nothing else can open it), for [`AuditLog::replay_deferred`]. Where
    /// the filesystem has no `O_TMPFILE` (gVisor's), a new file of a name of its own, removed as soon as it is open,
    /// which leaves the same: a file only this descriptor reaches.
    pub fn deferred(dir: &Path) -> io::Result<Self> {
        let unnamed = OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(dir);
        let file = match unnamed {
            Ok(file) => file,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => {
                named_then_removed(dir)?
            }
            Err(e) => return Err(e),
        };
        Ok(Self::with_sink(Sink::Deferred(file)))
    }

    /// Copies every line kept by a [`AuditLog::deferred`] log to `out`, in order; nothing for another sink. Later
    /// lines are kept too, for another replay.
    pub fn replay_deferred(&self, out: &mut dyn Write) -> io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut sink = self.sink.write().unwrap_or_else(|p| p.into_inner());
        let Sink::Deferred(file) = &mut *sink else { return Ok(()) };
        let end = file.stream_position()?;
        file.seek(SeekFrom::Start(0))?;
        let copied = io::copy(&mut Read::by_ref(file).take(end), out);
        file.seek(SeekFrom::Start(end))?;
        copied.map(drop)
    }

    /// Whether a [`AuditLog::deferred`] log has kept no line yet (always true for another sink): a run that made no
    /// request has no log file to keep.
    pub fn deferred_is_empty(&self) -> bool {
        use std::io::Seek;
        let mut sink = self.sink.write().unwrap_or_else(|p| p.into_inner());
        let Sink::Deferred(file) = &mut *sink else { return true };
        file.stream_position().is_ok_and(|end| end == 0)
    }

    fn with_sink(sink: Sink) -> Self {
        Self {
            sink: RwLock::new(sink),
            next_id: AtomicU64::new(1),
            container: None,
            labels: None,
            containment: None,
            refused: Mutex::default(),
            noticed: Mutex::default(),
        }
    }

    /// Every line written from now on carries `"container": id` (the Docker container this run serves).
    pub fn with_container(mut self, id: &str) -> Self {
        self.container = Some(id.into());
        self
    }

    /// Every line written from now on carries `"labels": {...}` (the attachment a node agent serves, say which pod).
    pub fn with_labels(mut self, labels: std::collections::BTreeMap<String, String>) -> Self {
        self.labels = (!labels.is_empty()).then_some(labels);
        self
    }

    /// Every line written from now on carries `"containment": word`: for a run whose command could go around the
    /// proxy (`advisory`), so that no line of it reads as enforced.
    pub fn with_containment(mut self, word: &'static str) -> Self {
        self.containment = Some(word);
        self
    }

    /// A fresh request id, unique in this run.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Write a decision line; a refusal written is also counted (see [`AuditLog::refusals`]), and so is each
    /// provider-side tool it says was stripped (see [`AuditLog::noticed`]).
    pub fn decision(&self, entry: &DecisionEntry<'_>) -> Result<(), AuditError> {
        self.write_line(entry)?;
        if let Some(refusal) = Refusal::of(entry.decision) {
            self.refused.lock().unwrap_or_else(|p| p.into_inner()).count(refusal, entry);
        }
        if let Some(stripped) = entry.stripped.as_deref().filter(|s| !s.is_empty()) {
            let mut noticed = self.noticed.lock().unwrap_or_else(|p| p.into_inner());
            let Noticed { stripped: list, untold, .. } = &mut *noticed;
            for tool in stripped {
                Noticed::count(list, &mut untold.1, (entry.host.to_string(), tool.clone()));
            }
        }
        Ok(())
    }

    /// Count an allowed request whose upstream (`authority`, `host:port`) failed, and why (an outcome's `error`).
    pub fn count_failure(&self, authority: &str, cause: &str) {
        let mut noticed = self.noticed.lock().unwrap_or_else(|p| p.into_inner());
        let Noticed { failures, untold, .. } = &mut *noticed;
        Noticed::count(failures, &mut untold.0, (authority.to_owned(), cause.to_owned()));
    }

    /// The upstream failures and stripped tools counted so far (see [`Noticed`]).
    pub fn noticed(&self) -> Noticed {
        self.noticed.lock().unwrap_or_else(|p| p.into_inner()).ranked()
    }

    /// The refusals written so far, by destination: the most frequent first.
    pub fn refusals(&self) -> Refusals {
        self.refused.lock().unwrap_or_else(|p| p.into_inner()).refusals()
    }

    /// Write an outcome line.
    pub fn outcome(&self, entry: &OutcomeEntry<'_>) -> Result<(), AuditError> {
        self.write_line(entry)
    }

    /// Write the line of a policy switch.
    pub fn switch(&self, entry: &SwitchEntry<'_>) -> Result<(), AuditError> {
        self.write_line(entry)
    }

    /// Flush buffered output (standard output is line-buffered by us; files are unbuffered, and their lines are
    /// synced to the disk here, if any was written since the last sync).
    pub fn flush(&self) -> Result<(), AuditError> {
        let sink = self.sink.read().unwrap_or_else(|p| p.into_inner());
        match &*sink {
            // Cleared before the sync: a line written meanwhile sets it again, for the next flush.
            Sink::File { file, path, unsynced } => match unsynced.swap(false, Ordering::AcqRel) {
                false => Ok(()),
                true => file.sync_data().map_err(|e| {
                    unsynced.store(true, Ordering::Release);
                    err(path, e)
                }),
            },
            Sink::Stdout => io::stdout().flush().map_err(|e| err(Path::new("<stdout>"), e)),
            Sink::Stderr | Sink::Deferred(_) | Sink::Discard => Ok(()),
        }
    }

    fn write_line<T: Serialize>(&self, entry: &T) -> Result<(), AuditError> {
        // Serialized into this thread's line buffer, kept for its next line: a fresh `Vec` grown to a line's size
        // was three calls into the allocator per line, two lines a request. A thread that is exiting, or a line
        // written while another is being serialized on the same thread, gets a buffer of its own.
        let own = |entry: &T| self.serialize_and_append(entry, &mut Vec::new());
        LINE.try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                let written = self.serialize_and_append(entry, &mut line);
                if line.capacity() > KEPT_LINE_CAPACITY {
                    *line = Vec::new();
                }
                written
            }
            Err(_) => own(entry),
        })
        .unwrap_or_else(|_| own(entry))
    }

    fn serialize_and_append<T: Serialize>(&self, entry: &T, line: &mut Vec<u8>) -> Result<(), AuditError> {
        let json = match (&self.container, &self.labels, self.containment) {
            (None, None, None) => serde_json::to_writer(&mut *line, entry),
            (container, labels, containment) => {
                let tagged = Tagged { entry, container: container.as_deref(), labels: labels.as_ref(), containment };
                serde_json::to_writer(&mut *line, &tagged)
            }
        };
        json.map_err(|e| err(Path::new("<json>"), e.into()))?;
        line.push(b'\n');
        let line = &line[..];
        // A poisoned lock only means another writer panicked mid-call; the file itself is still fine to append to.
        let sink = self.sink.read().unwrap_or_else(|p| p.into_inner());
        if let Sink::File { file, path, unsynced } = &*sink {
            return append_line(file, path, unsynced, line);
        }
        drop(sink);
        let mut sink = self.sink.write().unwrap_or_else(|p| p.into_inner());
        match &mut *sink {
            Sink::File { file, path, unsynced } => append_line(file, path, unsynced, line),
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line).and_then(|()| out.flush()).map_err(|e| err(Path::new("<stdout>"), e))
            }
            Sink::Stderr => io::stderr().lock().write_all(line).map_err(|e| err(Path::new("<stderr>"), e)),
            Sink::Deferred(file) => file.write_all(line).map_err(|e| err(Path::new("<deferred>"), e)),
            Sink::Discard => Ok(()),
        }
    }
}

thread_local! {
    /// The buffer [`AuditLog::write_line`] serializes this thread's lines into.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A line buffer grown past this (a line quoting a long URL) is dropped after its line rather than kept.
const KEPT_LINE_CAPACITY: usize = 16 * 1024;

/// The refusals written so far, keyed by destination and reason.
#[derive(Default)]
struct Tally {
    by_destination: HashMap<(Refusal, RequestKind, Box<str>, u16, Reason), Counted>,
    untold: Untold,
}

struct Counted {
    count: u64,
    example_path: Option<Box<str>>,
    /// How many destinations were seen before this one: ties in the summary keep the order they happened in.
    order: usize,
}

impl Tally {
    fn count(&mut self, refusal: Refusal, entry: &DecisionEntry<'_>) {
        let key = (refusal, entry.kind().request_kind(), Box::from(&*entry.host), entry.port, entry.reason);
        let order = self.by_destination.len();
        if order >= MAX_REFUSED_DESTINATIONS && !self.by_destination.contains_key(&key) {
            return self.count_untold(refusal);
        }
        let example_path = || entry.path.as_deref().map(|path| Box::from(cut(path, MAX_EXAMPLE_PATH)));
        let counted =
            self.by_destination.entry(key).or_insert_with(|| Counted { count: 0, example_path: example_path(), order });
        counted.count = counted.count.saturating_add(1);
    }

    fn refusals(&self) -> Refusals {
        let mut ranked: Vec<_> = self.by_destination.iter().collect();
        ranked.sort_unstable_by_key(|(_, c)| (std::cmp::Reverse(c.count), c.order));
        let destinations = ranked
            .into_iter()
            .map(|((refusal, kind, host, port, reason), c)| RefusedDestination {
                refusal: *refusal,
                kind: *kind,
                host: host.clone(),
                port: *port,
                reason: *reason,
                count: c.count,
                example_path: c.example_path.clone(),
            })
            .collect();
        Refusals { destinations, untold: self.untold }
    }

    fn count_untold(&mut self, refusal: Refusal) {
        let counter = match refusal {
            Refusal::Refused => &mut self.untold.refused,
            Refusal::WouldBlock => &mut self.untold.would_block,
        };
        *counter = counter.saturating_add(1);
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    text.get(..end).unwrap_or_default()
}

/// Most names tried for [`named_then_removed`] before giving up (each taken by someone else).
const NAMED_TRIES: u32 = 100;

/// A new file in `dir` (`O_EXCL`, so nothing planted there is opened), unlinked at once.
fn named_then_removed(dir: &Path) -> io::Result<File> {
    for attempt in 0..NAMED_TRIES {
        let path = dir.join(format!(".leash-log-{}-{attempt}", std::process::id()));
        match OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path) {
            Ok(file) => {
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free name for the kept log"))
}

/// An entry with the container or the attachment it came from appended.
#[derive(Serialize)]
struct Tagged<'a, T> {
    #[serde(flatten)]
    entry: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a std::collections::BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    containment: Option<&'a str>,
}

/// The log file at `path` opened again on the operator's signal, created (mode 0600) or appended to. The path's
/// directory may be writable by others (a `leash run` command may own it), so what is there now is not trusted: a
/// symlink is not followed (`O_NOFOLLOW`), a FIFO cannot hold the open (`O_NONBLOCK`: without a reader it fails,
/// with one the type check below refuses it), and anything but a regular file is refused.
fn reopen_file(path: &Path) -> io::Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let file = OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(flags).open(path);
    let file = file.map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::other("it is a symbolic link, which is not followed"),
        Some(libc::ENXIO) => io::Error::other("it is a FIFO or socket, not a regular file"),
        _ => e,
    })?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::other("it is not a regular file (a FIFO, socket or device)"));
    }
    Ok(file)
}

/// Append one line to the log file.
fn append_line(file: &File, path: &Path, unsynced: &AtomicBool, line: &[u8]) -> Result<(), AuditError> {
    // INVARIANT: a line goes only to the file opened at start or by the operator's reopen, never to whatever is at
    // the log's path now.
    still_named(file).map_err(|e| err(path, e))?;
    // One write of a whole line, on O_APPEND: a crash can cut only the line being written, and another thread's line
    // goes before or after it, never into it.
    (&*file).write_all(line).map_err(|e| err(path, e))?;
    unsynced.store(true, Ordering::Release);
    Ok(())
}

/// Fails if the open log file has no name left (deleted): every line written to it would be lost with the last
/// descriptor. A `statx` per line that asks for the link count alone. The path is not opened again: whatever is
/// there now may be someone else's (see the module's note); the operator's [`AuditLog::reopen`] makes a new file.
///
/// Why not `fstat`: it asks for the file's times too, and on a file system with fine-grained timestamps (ext4,
/// xfs, btrfs and tmpfs since Linux 6.13) a read of them obliges the next write to stamp the file anew and dirty
/// its inode, where a write in the same clock tick would otherwise leave the inode alone. Measured on ext4: an
/// `fstat` before each 300-byte append made the pair cost 825–954 ns, a link-count `statx` 581–585, the append
/// alone 402–410. Where `statx` is not there (a kernel before 4.11, a filter that refuses it) `fstat` answers.
fn still_named(file: &File) -> io::Result<()> {
    let nlink = match statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::NLINK) {
        Ok(stat) if StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::NLINK) => {
            u64::from(stat.stx_nlink)
        }
        _ => file.metadata()?.nlink(),
    };
    match nlink {
        0 => Err(io::Error::other("the file was deleted; no line is written into an unlinked file")),
        _ => Ok(()),
    }
}

fn err(path: &Path, source: io::Error) -> AuditError {
    AuditError { where_: format!("`{}`", path.display()), source }
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
    Timestamp::at(t).as_str().to_owned()
}

/// A time as RFC 3339 UTC text with milliseconds (`2026-12-02T16:42:13.123Z`), held on the stack: every audit line
/// carries one, two lines a request, and a `String` each was an allocation. Written digit by digit rather than
/// through `format!`, whose machinery was 2.6 % of a plain request's CPU.
pub struct Timestamp {
    text: [u8; 32],
    len: usize,
}

impl Timestamp {
    /// Now.
    pub fn now() -> Self {
        Self::at(SystemTime::now())
    }

    /// `t`; a time before 1970 reads as 1970's first instant.
    pub fn at(t: SystemTime) -> Self {
        let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let secs = since.as_secs();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, d) = civil_from_days(days as i64);
        let fields: [(u64, usize, u8); 7] = [
            (u64::try_from(y).unwrap_or(0), 4, b'-'),
            (m.into(), 2, b'-'),
            (d.into(), 2, b'T'),
            (rem / 3600, 2, b':'),
            (rem % 3600 / 60, 2, b':'),
            (rem % 60, 2, b'.'),
            (since.subsec_millis().into(), 3, b'Z'),
        ];
        // At most 32 bytes: a `u64` of seconds is a year of 12 digits, and the rest is 20.
        let mut stamp = Self { text: [0; 32], len: 0 };
        for (value, width, then) in fields {
            stamp.push_padded(value, width);
            stamp.push(then);
        }
        stamp
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever pushed.
        std::str::from_utf8(&self.text[..self.len]).unwrap_or_default()
    }

    fn push(&mut self, byte: u8) {
        if let Some(slot) = self.text.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// `value` in decimal, zero-padded to `width` digits (more when it needs more, as `{:0width$}` does).
    fn push_padded(&mut self, value: u64, width: usize) {
        let mut digits = [b'0'; 20];
        let (mut at, mut rest) = (digits.len(), value);
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        for &digit in &digits[at.min(digits.len() - width)..] {
            self.push(digit);
        }
    }
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
    fn a_kept_log_without_o_tmpfile_is_a_file_no_name_reaches_and_a_planted_name_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let planted = dir.path().join(format!(".leash-log-{}-0", std::process::id()));
        std::fs::write(&planted, "planted\n").unwrap();
        let mut file = named_then_removed(dir.path()).unwrap();
        file.write_all(b"kept\n").unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(names, std::slice::from_ref(&planted), "only the planted file has a name");
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "planted\n", "never opened");
        use std::io::{Read, Seek, SeekFrom};
        file.seek(SeekFrom::Start(0)).unwrap();
        let mut kept = String::new();
        file.read_to_string(&mut kept).unwrap();
        assert_eq!(kept, "kept\n");
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_229_733_123);
        assert_eq!(rfc3339(t), "2026-12-02T16:42:13.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        let late = SystemTime::UNIX_EPOCH + Duration::from_millis(253_402_300_799_999); // the last of 9999
        assert_eq!(rfc3339(late), "9999-12-31T23:59:59.999Z");
        let beyond = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_800); // a fifth digit, as `{:04}` gave
        assert_eq!(rfc3339(beyond), "10000-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH - Duration::from_secs(1)), "1970-01-01T00:00:00.000Z");
        let last = SystemTime::UNIX_EPOCH + Duration::new(i64::MAX as u64, 999_999_999); // the latest there is
        assert_eq!(rfc3339(last), "292277026596-12-04T15:30:07.999Z");
    }

    /// A decision line for `method host:port path`, decided `decision` for `reason`.
    fn line<'a>(
        method: &'a str,
        host: &'a str,
        port: u16,
        path: Option<&'a str>,
        decision: Verdict,
        reason: Reason,
    ) -> DecisionEntry<'a> {
        DecisionEntry {
            id: 1,
            time: now_rfc3339().into(),
            method: method.into(),
            host: host.into(),
            port,
            path: path.map(Into::into),
            decision,
            rule: None,
            reason,
            client: None,
            stripped: None,
            credential: None,
            service: None,
            upgrade_dropped: None,
            decided_by: None,
            answer: None,
            waited_ms: None,
        }
    }

    #[test]
    fn stripped_tools_and_upstream_failures_are_counted_for_the_summary() {
        let log = AuditLog::discard();
        let tools = ["web_search".to_owned()];
        for _ in 0..2 {
            let mut entry = line("POST", "models.test", 443, Some("/v1/messages"), Verdict::Allow, Reason::Rule);
            entry.stripped = Some(std::borrow::Cow::Borrowed(&tools[..]));
            log.decision(&entry).unwrap();
        }
        log.decision(&line("GET", "plain.test", 80, Some("/"), Verdict::Allow, Reason::Rule)).unwrap();
        log.count_failure("git.test:443", "reset");
        let noticed = log.noticed();
        assert_eq!(noticed.stripped, [(("models.test".to_owned(), "web_search".to_owned()), 2)]);
        assert_eq!(noticed.failures, [(("git.test:443".to_owned(), "reset".to_owned()), 1)]);
        for n in 0..(MAX_NOTICED + 5) {
            log.count_failure(&format!("h{n}.test:443"), "refused");
        }
        let noticed = log.noticed();
        assert_eq!((noticed.failures.len(), noticed.untold.0), (MAX_NOTICED, 6), "bounded, the rest counted");
    }

    #[test]
    fn refusals_are_tallied_by_destination_and_allows_are_not() {
        let log = AuditLog::discard();
        for path in ["/a", "/b"] {
            log.decision(&line("GET", "api.example.test", 80, Some(path), Verdict::Block, Reason::NotAllowed)).unwrap();
        }
        log.decision(&line("CONNECT", "api.example.test", 443, None, Verdict::Block, Reason::NotAllowed)).unwrap();
        log.decision(&line("DNS", "api.example.test", 53, None, Verdict::WouldBlock, Reason::NotAllowed)).unwrap();
        log.decision(&line("GET", "example.test", 80, Some("/"), Verdict::Allow, Reason::Rule)).unwrap();
        log.decision(&line("CONNECT", "example.test", 443, None, Verdict::Inspect, Reason::Rule)).unwrap();
        let refusals = log.refusals();
        assert_eq!((refusals.total(Refusal::Refused), refusals.total(Refusal::WouldBlock)), (3, 1));
        let told: Vec<_> = refusals
            .destinations
            .iter()
            .map(|d| (d.refusal, d.kind, d.host.as_ref(), d.port, d.reason, d.count, d.example_path.as_deref()))
            .collect();
        assert_eq!(
            told,
            [
                (Refusal::Refused, RequestKind::Http, "api.example.test", 80, Reason::NotAllowed, 2, Some("/a")),
                (Refusal::Refused, RequestKind::Tunnel, "api.example.test", 443, Reason::NotAllowed, 1, None),
                (Refusal::WouldBlock, RequestKind::Lookup, "api.example.test", 53, Reason::NotAllowed, 1, None),
            ]
        );
    }

    #[test]
    fn the_tally_is_bounded_and_counts_what_it_cannot_tell_apart() {
        let log = AuditLog::discard();
        let long = format!("/{}", "é".repeat(MAX_EXAMPLE_PATH));
        for i in 0..MAX_REFUSED_DESTINATIONS + 5 {
            let host = format!("h{i}.test");
            log.decision(&line("GET", &host, 80, Some(&long), Verdict::Block, Reason::NotAllowed)).unwrap();
        }
        // A destination already told apart is still counted as itself.
        log.decision(&line("GET", "h0.test", 80, Some("/"), Verdict::Block, Reason::NotAllowed)).unwrap();
        let refusals = log.refusals();
        assert_eq!(refusals.destinations.len(), MAX_REFUSED_DESTINATIONS);
        assert_eq!(refusals.untold, Untold { refused: 5, would_block: 0 });
        assert_eq!(refusals.total(Refusal::Refused), MAX_REFUSED_DESTINATIONS as u64 + 6);
        let first = &refusals.destinations[0];
        assert_eq!((first.host.as_ref(), first.count), ("h0.test", 2));
        let example = first.example_path.as_deref().unwrap();
        assert!(example.len() <= MAX_EXAMPLE_PATH && long.starts_with(example), "{example}");
    }

    #[test]
    fn a_container_log_names_the_container_on_every_line() {
        let path = std::env::temp_dir().join(format!("leash-audit-container-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = AuditLog::open(&path).map(|l| l.with_container("c0ffee")).unwrap();
        log.outcome(&outcome(1)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(text.starts_with("{\"id\":1,") && text.ends_with(",\"container\":\"c0ffee\"}\n"), "{text}");
    }

    /// A log in a fresh directory, with its path and the directory (kept alive by the caller).
    fn log_in_tempdir() -> (AuditLog, PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        (AuditLog::open(&path).unwrap(), path, dir)
    }

    fn outcome(id: u64) -> OutcomeEntry<'static> {
        let time = now_rfc3339().into();
        OutcomeEntry {
            id,
            time,
            status: 200,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0.0,
            error: None,
            upstream_proxy_answer: None,
        }
    }

    #[test]
    fn a_reopen_refuses_a_symlink_at_the_path_and_lines_go_on_to_the_open_file() {
        let (log, path, dir) = log_in_tempdir();
        log.outcome(&outcome(1)).unwrap();
        let (moved, theirs) = (dir.path().join("moved.jsonl"), dir.path().join("theirs.jsonl"));
        std::fs::rename(&path, &moved).unwrap();
        std::fs::write(&theirs, "").unwrap();
        std::os::unix::fs::symlink(&theirs, &path).unwrap();
        let refused = log.reopen().unwrap_err().to_string();
        assert!(refused.contains("symbolic link"), "{refused}");
        log.outcome(&outcome(2)).unwrap();
        assert_eq!(std::fs::read_to_string(&moved).unwrap().lines().count(), 2);
        assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "", "nothing went through the symlink");
    }

    #[test]
    fn a_reopen_refuses_a_fifo_at_the_path_with_or_without_a_reader_and_never_blocks() {
        let (log, path, dir) = log_in_tempdir();
        std::fs::rename(&path, dir.path().join("moved.jsonl")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
        // No reader: a blocking open would wait forever (so the reopen runs on a thread, waited for a bounded time).
        let log = std::sync::Arc::new(log);
        let reopen = || {
            let (log, (done, answer)) = (std::sync::Arc::clone(&log), std::sync::mpsc::channel());
            std::thread::spawn(move || done.send(log.reopen().map_err(|e| e.to_string())));
            answer.recv_timeout(Duration::from_secs(5)).expect("the reopen blocked on the FIFO")
        };
        assert!(reopen().unwrap_err().contains("FIFO"));
        // A reader waiting: the open succeeds, and the type check refuses it.
        let mut reader = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).unwrap();
        assert!(reopen().unwrap_err().contains("not a regular file"));
        log.outcome(&outcome(1)).unwrap();
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut reader, &mut got);
        assert!(got.is_empty(), "nothing was written into the FIFO: {got:?}");
    }

    /// Lines to a file are written without a lock of leash's own (see the module's note). Many threads writing long
    /// lines (each crossing page boundaries) while another flushes and the operator rotates the log: every line is
    /// whole, in one of the two files, and each id is there exactly once.
    #[test]
    fn lines_written_side_by_side_stay_whole_across_flushes_and_a_rotation() {
        const THREADS: u64 = 6;
        const LINES: u64 = 400;
        let (log, path, dir) = log_in_tempdir();
        let log = std::sync::Arc::new(log);
        let long = format!("/{}", "x".repeat(5_000));
        let rotated = dir.path().join("rotated.jsonl");
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (log, long) = (&log, &long);
                scope.spawn(move || {
                    for i in 0..LINES {
                        let mut entry = line("GET", "example.test", 80, Some(long), Verdict::Allow, Reason::Rule);
                        entry.id = t * LINES + i;
                        log.decision(&entry).unwrap();
                    }
                });
            }
            scope.spawn(|| {
                for _ in 0..20 {
                    log.flush().unwrap();
                }
                std::fs::rename(&path, &rotated).unwrap();
                log.reopen().unwrap();
                log.flush().unwrap();
            });
        });
        let mut ids = Vec::new();
        for file in [&rotated, &path] {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(text.is_empty() || text.ends_with('\n'), "{} ends inside a line", file.display());
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("a cut line ({e})"));
                assert_eq!(v["path"].as_str(), Some(long.as_str()));
                ids.push(v["id"].as_u64().unwrap());
            }
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..THREADS * LINES).collect::<Vec<_>>(), "each line once");
    }

    /// Lines from one thread share its line buffer: each must be written as it is, whatever the line before it was
    /// (longer, past the size the buffer keeps, or with other fields), with nothing of an earlier line left in it.
    #[test]
    fn a_thread_s_lines_carry_nothing_of_the_line_before() {
        let (log, path, _dir) = log_in_tempdir();
        let paths =
            ["/".to_owned(), format!("/{}", "y".repeat(40_000)), "/a".to_owned(), format!("/{}", "z".repeat(900))];
        let mut expected = Vec::new();
        for (i, p) in paths.iter().chain(paths.iter().rev()).enumerate() {
            let mut entry = line("GET", "example.test", 80, Some(p), Verdict::Allow, Reason::Rule);
            entry.id = i as u64;
            log.decision(&entry).unwrap();
            expected.push(serde_json::to_string(&entry).unwrap());
            let outcome = outcome(i as u64);
            log.outcome(&outcome).unwrap();
            expected.push(serde_json::to_string(&outcome).unwrap());
        }
        log.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    }
}
