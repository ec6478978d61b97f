//! `leash log summary LOG...`: what audit logs record, per host and port — how many requests were allowed, refused
//! or would have been (`would-block`), the bytes each way and why requests were refused — as an aligned table for a
//! person or, with `--json`, one JSON document for a program (its shape is in docs/audit-log.md).
//!
//! Ask mode's lines count by their decision: a host a person approved (`approved`) is allowed, with the answers
//! (`once`, `run`, `always`) shown beside the reasons; one a person refused (`denied`) or nobody answered in time
//! (`ask-timeout`) is refused, for that reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use leash_policy::{Reason, Verdict};
use leash_proxy::audit::verdict_word;
use serde_json::{json, Value};

use crate::cli::LogSummaryArgs;
use crate::exit::{Exit, Failure};
use crate::shared::audit_read::{read_logs, LogFile, Record};

pub fn summary(args: &LogSummaryArgs) -> Result<Exit, Failure> {
    let files = read_logs("log summary", &args.logs)?;
    let rows = rows(&files);
    if args.json {
        println!("{}", document(&files, &rows));
    } else {
        print!("{}", table(&rows));
        println!("{}", totals_line(&Totals::of(&rows), files.len()));
    }
    Ok(Exit::Ok)
}

/// Everything recorded for one host and port (lookups by the DNS stub apart from requests).
#[derive(Debug, Default)]
struct Row {
    host: String,
    port: u16,
    lookup: bool,
    /// CONNECTs among the decisions: a tunnel and the requests inspected inside it are counted apart.
    tunnels: usize,
    allowed: usize,
    refused: usize,
    would_block: usize,
    bytes_up: u64,
    bytes_down: u64,
    /// `(decision, reason)` → count; decisions in [`decision_rank`] order.
    reasons: BTreeMap<(u8, &'static str, String), usize>,
    upstream_errors: BTreeMap<String, usize>,
    /// Provider-side tools stripped from model requests, by tool.
    stripped: BTreeMap<String, usize>,
    /// Ask mode: allowed requests a person approved, by answer (`once`, `run`, `always`).
    approved: BTreeMap<String, usize>,
}

impl Row {
    /// Every decision of the row: requests, tunnels (or lookups).
    fn decisions(&self) -> usize {
        self.allowed + self.refused + self.would_block
    }

    /// Decisions that were not tunnels.
    fn requests(&self) -> usize {
        self.decisions() - self.tunnels
    }

    /// Refused and would-block together: what sorts a row to the top.
    fn refusals(&self) -> usize {
        self.refused + self.would_block
    }

    fn add(&mut self, record: &Record) {
        self.tunnels += usize::from(record.is_tunnel());
        let decided = record.line.decision;
        match decided {
            Verdict::Allow | Verdict::Inspect => self.allowed += 1,
            Verdict::Block => self.refused += 1,
            Verdict::WouldBlock => self.would_block += 1,
        }
        let key = (decision_rank(decided), verdict_word(decided), record.line.reason.as_str().to_owned());
        *self.reasons.entry(key).or_default() += 1;
        for tool in record.line.stripped.iter().flat_map(|tools| tools.iter()) {
            *self.stripped.entry(tool.clone()).or_default() += 1;
        }
        if decided == Verdict::Allow && record.line.reason == Reason::Approved {
            let answer = record.line.answer.as_deref().unwrap_or("unknown").to_owned();
            *self.approved.entry(answer).or_default() += 1;
        }
        let Some(outcome) = &record.outcome else { return };
        // An inspected tunnel's bytes are those of the requests inside it, which have lines (and bytes) of their own.
        if decided != Verdict::Inspect {
            self.bytes_up += outcome.bytes_up;
            self.bytes_down += outcome.bytes_down;
        }
        if let Some(error) = outcome.error {
            *self.upstream_errors.entry(error.as_str().to_owned()).or_default() += 1;
        }
    }
}

/// Refusals first in a row's reasons, then what would have been refused, then allows.
fn decision_rank(decided: Verdict) -> u8 {
    match decided {
        Verdict::Block => 0,
        Verdict::WouldBlock => 1,
        Verdict::Allow => 2,
        Verdict::Inspect => 3,
    }
}

/// One row per host, port and kind; rows with refusals first, most refused first, then the busiest.
fn rows(files: &[LogFile]) -> Vec<Row> {
    let mut by_key: BTreeMap<(String, u16, bool), Row> = BTreeMap::new();
    for record in files.iter().flat_map(|f| &f.records) {
        let key = (record.line.host.to_string(), record.line.port, record.is_lookup());
        let row = by_key.entry(key).or_insert_with(|| Row {
            host: record.line.host.to_string(),
            port: record.line.port,
            lookup: record.is_lookup(),
            ..Row::default()
        });
        row.add(record);
    }
    let mut rows: Vec<Row> = by_key.into_values().collect();
    rows.sort_by(|a, b| {
        (b.refusals() > 0)
            .cmp(&(a.refusals() > 0))
            .then(b.refusals().cmp(&a.refusals()))
            .then(b.decisions().cmp(&a.decisions()))
            .then(a.host.cmp(&b.host))
            .then(a.port.cmp(&b.port))
    });
    rows
}

#[derive(Debug, Default)]
struct Totals {
    requests: usize,
    tunnels: usize,
    allowed: usize,
    refused: usize,
    would_block: usize,
    /// Of `allowed`, those a person approved (ask mode).
    approved: usize,
    lookups: usize,
    bytes_up: u64,
    bytes_down: u64,
}

impl Totals {
    fn of(rows: &[Row]) -> Totals {
        let mut t = Totals::default();
        for row in rows {
            if row.lookup {
                t.lookups += row.decisions();
                continue;
            }
            t.requests += row.requests();
            t.tunnels += row.tunnels;
            t.allowed += row.allowed;
            t.refused += row.refused;
            t.would_block += row.would_block;
            t.approved += row.approved.values().sum::<usize>();
            t.bytes_up += row.bytes_up;
            t.bytes_down += row.bytes_down;
        }
        t
    }
}

const HEADER: [&str; 8] = ["HOST", "PORT", "ALLOWED", "REFUSED", "WOULD-BLOCK", "UP", "DOWN", "REASONS"];

/// The rows as an aligned table: text left-aligned, numbers right-aligned, the reasons last and unpadded.
fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let cells: Vec<[String; 8]> = std::iter::once(HEADER.map(str::to_owned)).chain(rows.iter().map(cells)).collect();
    let mut widths = [0; 8];
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &cells {
        let mut line = format!("{:<w0$}  {:>w1$}", row[0], row[1], w0 = widths[0], w1 = widths[1]);
        for (cell, width) in row[2..7].iter().zip(&widths[2..7]) {
            let _ = write!(line, "  {cell:>width$}");
        }
        let _ = writeln!(out, "{}", format!("{line}  {}", row[7]).trim_end());
    }
    out
}

fn cells(row: &Row) -> [String; 8] {
    [
        row.host.clone(),
        if row.lookup { "dns".to_owned() } else { row.port.to_string() },
        row.allowed.to_string(),
        row.refused.to_string(),
        row.would_block.to_string(),
        human_bytes(row.bytes_up),
        human_bytes(row.bytes_down),
        refusal_reasons(row),
    ]
}

/// Why requests were refused (and, after `would-block:`, why others would have been), most frequent first.
fn refusal_reasons(row: &Row) -> String {
    let of = |decided: Verdict| {
        let mut counted: Vec<(&str, usize)> = row
            .reasons
            .iter()
            .filter(|((_, word, _), _)| *word == verdict_word(decided))
            .map(|((_, _, reason), n)| (reason.as_str(), *n))
            .collect();
        counted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        counted.iter().map(|(reason, n)| format!("{reason} {n}")).collect::<Vec<_>>().join(", ")
    };
    let refusals = match (of(Verdict::Block), of(Verdict::WouldBlock)) {
        (refused, would) if would.is_empty() => refused,
        (refused, would) if refused.is_empty() => format!("would-block: {would}"),
        (refused, would) => format!("{refused}; would-block: {would}"),
    };
    let listed = |counts: &BTreeMap<String, usize>| {
        counts.iter().map(|(what, n)| format!("{what} {n}")).collect::<Vec<_>>().join(", ")
    };
    // Besides refusals, what an allowed request's line alone would not tell: a person's approval, an upstream that
    // failed (a tunnel "allowed" with nothing carried), a provider-side tool stripped from a model request.
    let parts = [
        (!refusals.is_empty()).then_some(refusals),
        (!row.approved.is_empty()).then(|| format!("approved: {}", listed(&row.approved))),
        (!row.upstream_errors.is_empty()).then(|| format!("failed upstream: {}", listed(&row.upstream_errors))),
        (!row.stripped.is_empty()).then(|| format!("stripped: {}", listed(&row.stripped))),
    ];
    parts.into_iter().flatten().collect::<Vec<_>>().join("; ")
}

fn totals_line(t: &Totals, files: usize) -> String {
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let approved = match t.approved {
        0 => String::new(),
        n => format!(" ({n} approved by a person)"),
    };
    format!(
        "{} and {} ({} allowed{approved}, {} refused, {} would-block), {}, {} up, {} down; from {}",
        plural(t.requests, "request", "requests"),
        plural(t.tunnels, "tunnel", "tunnels"),
        t.allowed,
        t.refused,
        t.would_block,
        plural(t.lookups, "DNS lookup", "DNS lookups"),
        human_bytes(t.bytes_up),
        human_bytes(t.bytes_down),
        plural(files, "log", "logs"),
    )
}

/// `812 B`, `1.5 KiB`, `3.0 MiB`: short enough for a column, exact in `--json`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    // Precision lost in the cast is far below the one decimal shown.
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The `--json` document; docs/audit-log.md describes it.
fn document(files: &[LogFile], rows: &[Row]) -> Value {
    let t = Totals::of(rows);
    json!({
        "files": files.iter().map(|f| json!({
            "path": f.path.display().to_string(),
            "records": f.records.len(),
            "skipped_lines": f.skipped,
            "unmatched_outcomes": f.unmatched_outcomes,
        })).collect::<Vec<_>>(),
        "totals": {
            "requests": t.requests, "tunnels": t.tunnels, "allowed": t.allowed, "refused": t.refused, "would_block": t.would_block,
            "approved": t.approved, "lookups": t.lookups, "bytes_up": t.bytes_up, "bytes_down": t.bytes_down,
        },
        "hosts": rows.iter().map(row_json).collect::<Vec<_>>(),
    })
}

fn row_json(row: &Row) -> Value {
    let mut reasons: Vec<_> = row.reasons.iter().collect();
    reasons
        .sort_by(|((rank_a, _, a), n_a), ((rank_b, _, b), n_b)| rank_a.cmp(rank_b).then(n_b.cmp(n_a)).then(a.cmp(b)));
    json!({
        "host": row.host,
        "port": row.port,
        "lookup": row.lookup,
        "requests": row.requests(),
        "tunnels": row.tunnels,
        "allowed": row.allowed,
        "refused": row.refused,
        "would_block": row.would_block,
        "bytes_up": row.bytes_up,
        "bytes_down": row.bytes_down,
        "reasons": reasons.iter().map(|((_, decision, reason), count)| json!({
            "decision": decision, "reason": reason, "count": count,
        })).collect::<Vec<_>>(),
        "upstream_errors": row.upstream_errors,
        "stripped": row.stripped,
        "approved": row.approved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::audit_read::from_lines;

    fn asked(id: u64, host: &str, decision: &str, reason: &str, answer: &str) -> String {
        format!(
            r#"{{"id":{id},"method":"CONNECT","host":"{host}","port":443,"path":null,"decision":"{decision}","rule":null,"reason":"{reason}","decided_by":"socket","answer":"{answer}","waited_ms":5.0}}"#
        )
    }

    fn ask_run() -> Vec<LogFile> {
        let lines = [
            asked(1, "a.test", "allow", "approved", "run"),
            asked(2, "a.test", "allow", "approved", "once"),
            r#"{"id":3,"method":"CONNECT","host":"a.test","port":443,"path":null,"decision":"allow","rule":"a.test","reason":"rule"}"#.to_owned(),
            asked(4, "b.test", "block", "denied", "deny"),
            asked(5, "c.test", "block", "ask-timeout", "timeout"),
        ];
        vec![from_lines(&lines.iter().map(String::as_str).collect::<Vec<_>>())]
    }

    #[test]
    fn approved_requests_count_as_allowed_and_denied_or_unanswered_ones_as_refused() {
        let files = ask_run();
        let rows = rows(&files);
        let table = table(&rows);
        let row = |host: &str| table.lines().find(|l| l.starts_with(host)).unwrap_or_else(|| panic!("{table}"));
        let cells = |host: &str| row(host).split_whitespace().take(5).collect::<Vec<_>>().join(" ");
        assert_eq!(cells("a.test"), "a.test 443 3 0 0");
        assert!(row("a.test").ends_with("  approved: once 1, run 1"), "{table}");
        assert_eq!(cells("b.test"), "b.test 443 0 1 0");
        assert!(row("b.test").ends_with("  denied 1"), "{table}");
        assert!(row("c.test").ends_with("  ask-timeout 1"), "{table}");
        let totals = totals_line(&Totals::of(&rows), 1);
        assert!(totals.contains("(3 allowed (2 approved by a person), 2 refused, 0 would-block)"), "{totals}");
        let doc = document(&files, &rows);
        assert_eq!((doc["totals"]["allowed"].as_u64(), doc["totals"]["approved"].as_u64()), (Some(3), Some(2)));
        let a = doc["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "a.test").unwrap();
        assert_eq!(a["approved"], json!({"once": 1, "run": 1}));
        let b = doc["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "b.test").unwrap();
        assert_eq!((b["refused"].as_u64(), b["approved"].clone()), (Some(1), json!({})));
        assert_eq!(b["reasons"], json!([{"decision": "block", "reason": "denied", "count": 1}]));
    }

    #[test]
    fn an_upstream_that_failed_and_tools_stripped_are_said_beside_the_allows() {
        // A tunnel allowed and carrying nothing used to read as an ordinary allow with 0 bytes.
        let lines = [
            r#"{"id":1,"method":"CONNECT","host":"git.test","port":443,"path":null,"decision":"allow","rule":"git.test","reason":"rule"}"#,
            r#"{"id":1,"status":502,"bytes_up":0,"bytes_down":0,"duration_ms":3.0,"error":"reset"}"#,
            r#"{"id":2,"method":"POST","host":"models.test","port":443,"path":"/v1/messages","decision":"allow","rule":"models.test","reason":"rule","stripped":["web_search","web_fetch"]}"#,
            r#"{"id":2,"status":200,"bytes_up":10,"bytes_down":20,"duration_ms":3.0}"#,
        ];
        let files = vec![from_lines(&lines)];
        let rows = rows(&files);
        let table = table(&rows);
        let row = |host: &str| table.lines().find(|l| l.starts_with(host)).unwrap_or_else(|| panic!("{table}"));
        assert!(row("git.test").ends_with("  failed upstream: reset 1"), "{table}");
        assert!(row("models.test").ends_with("  stripped: web_fetch 1, web_search 1"), "{table}");
        let doc = document(&files, &rows);
        let models = doc["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "models.test").unwrap();
        assert_eq!(models["stripped"], json!({"web_fetch": 1, "web_search": 1}));
    }

    #[test]
    fn bytes_are_shown_in_binary_units_with_one_decimal() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
