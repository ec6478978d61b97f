//! Reading audit logs back (`leash log summary`, `leash policy suggest`): each file's JSON lines parsed, outcome
//! lines joined to their decision by `id`, and every line that is not an audit record skipped and counted, because a
//! log replayed onto stderr by `leash run` sits among warnings and other output. What the fields mean is
//! docs/audit-log.md; this module only turns lines into [`Record`]s and does not judge them.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use leash_policy::Verdict;
use leash_proxy::audit::{AuditLine, DecisionEntry, LineKind, OutcomeEntry};

use crate::exit::{Exit, Failure};

/// One decision line, with the outcome line that shares its `id` when there was one. Its strings are printable
/// (see [`printable`]); a service's `host` is `service:NAME`.
#[derive(Debug, Clone)]
pub struct Record {
    pub line: DecisionEntry<'static>,
    pub outcome: Option<OutcomeEntry<'static>>,
}

/// One file's records, in the order their decision lines came.
#[derive(Debug)]
pub struct LogFile {
    pub path: PathBuf,
    pub records: Vec<Record>,
    /// Lines that are not audit records (warnings, other output, a truncated line); blank lines are not counted.
    pub skipped: usize,
    /// Outcome lines with no decision before them (the log was rotated between the two, say).
    pub unmatched_outcomes: usize,
}

impl Record {
    /// A lookup answered by `leash run`'s DNS stub, not a request.
    pub fn is_lookup(&self) -> bool {
        self.line.kind() == LineKind::Lookup
    }

    pub fn is_tunnel(&self) -> bool {
        self.line.kind() == LineKind::Tunnel
    }

    /// A connection or request on one of the policy's services, which the proxy's rules do not decide.
    pub fn is_service(&self) -> bool {
        self.line.service.is_some()
    }
}

/// Read every file (`-` is standard input), telling on stderr how many lines each had that were not records. A file
/// that cannot be read is a usage failure naming it.
pub fn read_logs(command: &str, paths: &[PathBuf]) -> Result<Vec<LogFile>, Failure> {
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let file = read_log(path).map_err(|e| {
            Failure::new(Exit::Usage, format!("leash {command}: cannot read audit log `{}`: {e}", path.display()))
        })?;
        report_leftovers(command, &file);
        files.push(file);
    }
    Ok(files)
}

/// One file's records. Only I/O errors fail: a line that is not a record is counted, never fatal.
pub fn read_log(path: &Path) -> std::io::Result<LogFile> {
    let source: Box<dyn Read> = match path.to_str() {
        Some("-") => Box::new(std::io::stdin().lock()),
        _ => Box::new(std::fs::File::open(path)?),
    };
    let mut joiner = Joiner::default();
    let mut reader = BufReader::new(source);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line)? > 0 {
        joiner.add_line(&String::from_utf8_lossy(&line));
        line.clear();
    }
    Ok(LogFile {
        path: path.to_owned(),
        records: joiner.records,
        skipped: joiner.skipped,
        unmatched_outcomes: joiner.unmatched_outcomes,
    })
}

fn report_leftovers(command: &str, file: &LogFile) {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if file.skipped > 0 {
        let what =
            if file.skipped == 1 { "line that is not an audit record" } else { "lines that are not audit records" };
        eprintln!("leash {command}: `{}`: skipped {} {what}", file.path.display(), file.skipped);
    }
    if file.unmatched_outcomes > 0 {
        let n = file.unmatched_outcomes;
        eprintln!(
            "leash {command}: `{}`: {n} outcome line{} matched no decision line before them",
            file.path.display(),
            plural(n)
        );
    }
}

/// Records in the making: `latest` maps an `id` to the last record that carried it. Ids restart with each run and
/// a log is appended to across runs, so a decision line always starts a new record, except a `block` following an
/// `allow` or `inspect` of the same id that has no outcome yet: that is the dial refused after all
/// (`internal-destination`, `upstream-tls`), and the client got the refusal.
#[derive(Default)]
struct Joiner {
    records: Vec<Record>,
    latest: HashMap<u64, usize>,
    skipped: usize,
    unmatched_outcomes: usize,
}

impl Joiner {
    fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        match AuditLine::parse(line) {
            Some(AuditLine::Decision(decision)) => self.add_decision(decision.id, decision_record(*decision)),
            Some(AuditLine::Outcome(outcome)) => self.add_outcome(outcome.id, outcome),
            // A policy switch is a line of the log, not a request: nothing to count.
            Some(AuditLine::Switch(_)) => {}
            None => self.skipped += 1,
        }
    }

    fn add_decision(&mut self, id: u64, record: Record) {
        if let Some(earlier) = self.latest.get(&id).and_then(|&i| self.records.get_mut(i)) {
            let refused_after_all = record.line.decision == Verdict::Block
                && matches!(earlier.line.decision, Verdict::Allow | Verdict::Inspect)
                && earlier.outcome.is_none()
                && earlier.line.host == record.line.host;
            if refused_after_all {
                *earlier = record;
                return;
            }
        }
        self.latest.insert(id, self.records.len());
        self.records.push(record);
    }

    fn add_outcome(&mut self, id: u64, outcome: OutcomeEntry<'static>) {
        match self.latest.get(&id).and_then(|&i| self.records.get_mut(i)) {
            Some(record) if record.outcome.is_none() => record.outcome = Some(outcome),
            _ => self.unmatched_outcomes += 1,
        }
    }
}

/// The records of `lines`, as [`read_log`] reads them from a file: for tests of the commands that read logs.
#[cfg(test)]
pub fn from_lines(lines: &[&str]) -> LogFile {
    let mut joiner = Joiner::default();
    for line in lines {
        joiner.add_line(line);
    }
    LogFile {
        path: PathBuf::from("test.jsonl"),
        records: joiner.records,
        skipped: joiner.skipped,
        unmatched_outcomes: joiner.unmatched_outcomes,
    }
}

/// A decision line as a record: its strings made printable, a service's host named after the service.
fn decision_record(mut line: DecisionEntry<'static>) -> Record {
    for text in [&mut line.method, &mut line.host] {
        *text = printable(text).into();
    }
    line.service = line.service.map(|name| printable(&name).into());
    if let Some(name) = &line.service {
        line.host = format!("service:{name}").into();
    }
    Record { line, outcome: None }
}

/// `text` with every character but printable ASCII escaped (`\u{1b}`): a refused request's host is the client's to
/// choose, and these strings reach a terminal and the comments of a suggested policy, where a newline would end the
/// comment.
fn printable(text: &str) -> String {
    if text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return text.to_owned();
    }
    text.chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c.to_string() } else { c.escape_default().to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(lines: &[&str]) -> Joiner {
        let mut j = Joiner::default();
        for line in lines {
            j.add_line(line);
        }
        j
    }

    const ALLOW: &str = r#"{"id":1,"time":"t","method":"GET","host":"a.test","port":80,"path":"/","decision":"allow","rule":"a.test","reason":"rule"}"#;
    const OUTCOME: &str = r#"{"id":1,"time":"t","status":200,"bytes_up":10,"bytes_down":20,"duration_ms":1.5}"#;

    #[test]
    fn outcomes_join_their_decision_and_junk_is_counted() {
        let j = join(&[ALLOW, "WARN leash: refused x.test", OUTCOME, "", "{\"id\":2}", "[1,2]", "{\"id\":3,"]);
        assert_eq!(j.records.len(), 1);
        let outcome = j.records[0].outcome.clone().unwrap();
        assert_eq!((outcome.status, outcome.bytes_up, outcome.bytes_down), (200, 10, 20));
        assert_eq!((j.skipped, j.unmatched_outcomes), (4, 0));
    }

    #[test]
    fn a_block_after_an_allow_of_the_same_id_replaces_it_and_a_new_run_starts_a_new_record() {
        let block = r#"{"id":1,"method":"GET","host":"a.test","port":80,"path":"/","decision":"block","rule":null,"reason":"internal-destination"}"#;
        let j = join(&[ALLOW, block]);
        assert_eq!(j.records.len(), 1);
        assert_eq!(
            (j.records[0].line.decision, j.records[0].line.reason.as_str()),
            (Verdict::Block, "internal-destination")
        );
        let j = join(&[ALLOW, OUTCOME, ALLOW, OUTCOME, OUTCOME]);
        assert_eq!(j.records.len(), 2, "ids restart when a log is appended to by a new run");
        assert!(j.records.iter().all(|r| r.outcome.is_some()));
        assert_eq!(j.unmatched_outcomes, 1);
    }

    #[test]
    fn would_block_is_a_decision_and_unknown_words_are_skipped() {
        let would = ALLOW.replace("\"allow\"", "\"would-block\"").replace("\"rule\"}", "\"not-allowed\"}");
        let future = ALLOW.replace("\"allow\"", "\"maybe\"");
        let j = join(&[&would, &future]);
        assert_eq!(j.records.len(), 1);
        assert_eq!(
            (j.records[0].line.decision, j.records[0].line.reason.as_str()),
            (Verdict::WouldBlock, "not-allowed")
        );
        assert_eq!(j.skipped, 1);
    }

    #[test]
    fn ask_modes_fields_are_read() {
        let approved = r#"{"id":4,"method":"CONNECT","host":"a.test","port":443,"decision":"allow","rule":null,"reason":"approved","decided_by":"socket","answer":"always","waited_ms":812.5}"#;
        let file = from_lines(&[approved]);
        let line = &file.records[0].line;
        assert_eq!((line.decision, line.reason.as_str()), (Verdict::Allow, "approved"));
        assert_eq!(
            (line.decided_by.as_deref(), line.answer.as_deref(), line.waited_ms),
            (Some("socket"), Some("always"), Some(812.5))
        );
    }

    #[test]
    fn control_characters_in_a_logged_host_are_escaped() {
        let j = join(&[&ALLOW.replace("a.test", "a\\n\\u001b[31m\\u202e.test")]);
        assert_eq!(j.records[0].line.host, "a\\n\\u{1b}[31m\\u{202e}.test");
    }
}
