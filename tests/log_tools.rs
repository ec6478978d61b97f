//! `leash log summary` and `leash policy suggest` over real audit logs: a `leash proxy --log` run with curl against
//! loopback origins, and a hand-written log with `would-block` lines and junk around them. A suggested policy must
//! pass `leash check` and, replayed through `leash explain`, allow every request the logs show allowed or
//! would-block — and never an IP literal or an internal destination.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod common;

use common::{log_lines, origin, stderr, stdout};

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

const LEASH: &str = env!("CARGO_BIN_EXE_leash");

fn leash(args: &[&str]) -> Output {
    Command::new(LEASH).args(args).env("RUST_LOG", "warn").output().expect("run leash")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A `leash proxy` on a free loopback port; stopped with SIGTERM (which flushes the log) by [`Proxy::stop`].
struct Proxy {
    child: Child,
    addr: String,
}

impl Proxy {
    fn start(policy: &Path, log: &Path, resolve: &[&str]) -> Proxy {
        let mut child = Command::new(LEASH)
            .args(["proxy", "--policy", policy.to_str().unwrap(), "--listen", "127.0.0.1:0", "--log"])
            .arg(log)
            .args(resolve.iter().flat_map(|r| ["--resolve", r]))
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("listening on ").expect("listening line").to_owned();
        Proxy { child, addr }
    }

    /// curl through the proxy; the HTTP status, `000` when there was none (a tunnel whose upstream refused).
    fn curl(&self, url: &str) -> String {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-x"])
            .arg(format!("http://{}", self.addr))
            .arg(url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn stop(mut self) {
        Command::new("kill").args(["-s", "TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(self.child.wait().unwrap().success(), "leash proxy stops cleanly");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on: a tunnel there is allowed, then its upstream refuses.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The names the proxy run's requests use, all answered with the loopback origin.
const NAMES: [&str; 7] =
    ["a.foo.co.uk", "b.foo.co.uk", "x.github.io", "y.github.io", "evil.test", "docs.test", "tls.test"];

/// A real audit log: allowed requests to two subdomains of foo.co.uk and two of github.io (a public suffix), a
/// tunnel on an extra port, and refusals by rule, by port, as an IP literal and as an internal destination.
fn proxy_log(dir: &Path) -> PathBuf {
    let (port, tunnel_port) = (origin(), closed_port());
    let policy = write(
        dir,
        "blocklist.yaml",
        &format!(
            "network:\n  mode: blocklist\n  blocked_urls: [evil.test, a.foo.co.uk/secret]\n  ports: [{port}]\n  \
             tunnel_ports: [{tunnel_port}]\n  allow_destinations: [127.0.0.1/32]\n"
        ),
    );
    let log = dir.join("audit.jsonl");
    let mut resolve: Vec<String> = NAMES.iter().map(|n| format!("{n}:127.0.0.1")).collect();
    resolve.push("internal.test:127.0.0.2".to_owned());
    let proxy = Proxy::start(&policy, &log, &resolve.iter().map(String::as_str).collect::<Vec<_>>());
    for (url, status) in [
        (format!("http://a.foo.co.uk:{port}/one"), "200"),
        (format!("http://a.foo.co.uk:{port}/two"), "200"),
        (format!("http://b.foo.co.uk:{port}/"), "200"),
        (format!("http://x.github.io:{port}/"), "200"),
        (format!("http://y.github.io:{port}/"), "200"),
        (format!("http://a.foo.co.uk:{port}/secret"), "403"),
        (format!("http://evil.test:{port}/"), "403"),
        (format!("http://evil.test:{port}/again"), "403"),
        ("http://docs.test/".to_owned(), "403"),
        (format!("http://127.0.0.1:{port}/"), "403"),
        (format!("http://internal.test:{port}/"), "403"),
        (format!("https://tls.test:{tunnel_port}/"), "000"),
    ] {
        assert_eq!(proxy.curl(&url), status, "{url}");
    }
    proxy.stop();
    log
}

/// `leash explain` of a logged request against `policy`: its exit status and first line.
fn replay(policy: &Path, line: &Value) -> (Option<i32>, String) {
    let (method, host, port) = (line["method"].as_str().unwrap(), line["host"].as_str().unwrap(), &line["port"]);
    let request = match method {
        "CONNECT" => vec!["CONNECT".to_owned(), format!("{host}:{port}")],
        _ => vec![method.to_owned(), format!("http://{host}:{port}{}", line["path"].as_str().unwrap_or("/"))],
    };
    let mut args = vec!["explain", "--policy", policy.to_str().unwrap()];
    args.extend(request.iter().map(String::as_str));
    let o = leash(&args);
    (o.status.code(), stdout(&o).lines().next().unwrap_or_default().to_owned())
}

/// Suggest a policy from `logs` into `dir`, check it with `leash check`, and replay every logged decision: what the
/// logs show allowed or would-block is allowed; an IP literal or internal destination refused there stays refused.
fn suggest_and_replay(dir: &Path, mode: &str, logs: &[&Path]) -> String {
    let out = dir.join(format!("suggested-{mode}.yaml"));
    let mut args = vec!["policy", "suggest", "--mode", mode, "--output", out.to_str().unwrap()];
    args.extend(logs.iter().map(|l| l.to_str().unwrap()));
    let o = leash(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let policy = std::fs::read_to_string(&out).unwrap();
    let checked = leash(&["check", out.to_str().unwrap()]);
    assert_eq!(checked.status.code(), Some(0), "{policy}\n{}", stderr(&checked));
    for line in logs.iter().flat_map(|l| lines_of(l)).filter(|l| l.get("decision").is_some() && l["method"] != "DNS") {
        let (code, first) = replay(&out, &line);
        match (line["decision"].as_str().unwrap(), line["reason"].as_str().unwrap()) {
            (_, "ip-literal" | "internal-destination") => {
                assert_eq!(code, Some(1), "never allowed: {line}\n{policy}\n{first}")
            }
            ("allow" | "inspect" | "would-block", _) => assert_eq!(code, Some(0), "{line}\n{policy}\n{first}"),
            _ => {}
        }
    }
    policy
}

/// Every JSON line of a log, junk lines left out.
fn lines_of(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The entry line of a suggested policy that lists `entry`.
fn entry_line<'a>(policy: &'a str, entry: &str) -> Option<&'a str> {
    policy.lines().find(|l| l.trim_start().starts_with(&format!("- {entry} ")))
}

fn summary_json(logs: &[&Path]) -> Value {
    let mut args = vec!["log", "summary", "--json"];
    args.extend(logs.iter().map(|l| l.to_str().unwrap()));
    let o = leash(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("one JSON document")
}

fn host_row<'a>(doc: &'a Value, host: &str) -> &'a Value {
    doc["hosts"].as_array().unwrap().iter().find(|h| h["host"] == host).unwrap_or_else(|| panic!("{host}: {doc}"))
}

#[test]
fn the_summary_of_a_proxy_log_puts_refusals_first_with_their_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let log = proxy_log(dir.path());
    assert_eq!(log_lines(&log).len(), 18, "12 decisions and 6 outcomes: {:?}", log_lines(&log));
    let o = leash(&["log", "summary", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let rows: Vec<&str> = out.lines().collect();
    assert!(rows[0].starts_with("HOST") && rows[0].contains("WOULD-BLOCK"), "{out}");
    assert!(rows[1].starts_with("evil.test ") && rows[1].ends_with("rule 2"), "most refused first: {out}");
    let a = rows.iter().find(|r| r.starts_with("a.foo.co.uk ")).unwrap();
    assert_eq!(a.split_whitespace().collect::<Vec<_>>()[2..5], ["2", "1", "0"], "allowed, refused, would-block: {a}");
    assert!(rows.iter().any(|r| r.starts_with("docs.test ") && r.ends_with("port 1")), "{out}");
    assert!(rows.iter().any(|r| r.starts_with("internal.test ") && r.ends_with("internal-destination 1")), "{out}");
    let table = &rows[1..rows.len() - 1];
    let has_refusals: Vec<bool> = table.iter().map(|r| column(r, 3) != "0" || column(r, 4) != "0").collect();
    assert!(has_refusals.windows(2).all(|w| w[0] >= w[1]), "rows with refusals first: {out}");
    let port_end = rows[0].find("PORT").unwrap() + "PORT".len();
    assert!(table.iter().all(|r| r[..port_end].ends_with(column(r, 1))), "ports right-aligned in one column: {out}");
    assert_eq!(
        rows.last().unwrap().split(" up").next().unwrap().split(", ").take(2).collect::<Vec<_>>(),
        ["11 requests and 1 tunnel (6 allowed", "6 refused"],
        "{out}"
    );
}

/// The `n`th whitespace-separated cell of a summary row (host, port, allowed, refused, would-block come first).
fn column(row: &str, n: usize) -> &str {
    row.split_whitespace().nth(n).unwrap_or_default()
}

#[test]
fn the_json_summary_counts_decisions_bytes_and_upstream_errors_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let log = proxy_log(dir.path());
    let doc = summary_json(&[&log]);
    let t = &doc["totals"];
    // The CONNECT to tls.test is a tunnel, counted apart from requests (and from those inspected inside one).
    assert_eq!(
        [&t["requests"], &t["tunnels"], &t["allowed"], &t["refused"], &t["would_block"], &t["lookups"]],
        [11, 1, 6, 6, 0, 0],
        "{doc}"
    );
    let a = host_row(&doc, "a.foo.co.uk");
    assert_eq!((&a["allowed"], &a["refused"]), (&Value::from(2), &Value::from(1)));
    assert!(a["bytes_down"].as_u64().unwrap() > 0 && a["bytes_up"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(a["reasons"][0], serde_json::json!({"decision": "block", "reason": "rule", "count": 1}));
    assert_eq!(host_row(&doc, "tls.test")["upstream_errors"]["refused"], 1, "{doc}");
    assert_eq!(
        (&host_row(&doc, "tls.test")["tunnels"], &host_row(&doc, "tls.test")["requests"]),
        (&1.into(), &0.into())
    );
    assert_eq!(host_row(&doc, "127.0.0.1")["reasons"][0]["reason"], "ip-literal");
    assert_eq!(doc["files"][0]["skipped_lines"], 0);
}

#[test]
fn a_suggested_allowlist_folds_subdomains_of_a_registrable_domain_only() {
    let dir = tempfile::tempdir().unwrap();
    let log = proxy_log(dir.path());
    let policy = suggest_and_replay(dir.path(), "allowlist", &[&log]);
    let folded = entry_line(&policy, ".foo.co.uk").unwrap_or_else(|| panic!("{policy}"));
    assert!(folded.contains("# 4 requests, 1 refused (rule): a.foo.co.uk 3, b.foo.co.uk 1"), "{policy}");
    assert!(entry_line(&policy, "a.foo.co.uk").is_none(), "{policy}");
    // github.io is a public suffix: x.github.io and y.github.io are two registrable domains of their own.
    assert!(entry_line(&policy, "x.github.io").is_some() && entry_line(&policy, "y.github.io").is_some(), "{policy}");
    assert!(entry_line(&policy, ".github.io").is_none(), "{policy}");
    for never in ["127.0.0.1", "internal.test", "evil.test", "docs.test"] {
        assert!(entry_line(&policy, never).is_none(), "{never} is not allowed: {policy}");
    }
    assert!(policy.contains("#   127.0.0.1: 1 request, 1 refused (ip-literal)"), "{policy}");
    assert!(policy.contains("#   internal.test: 1 request, 1 refused (internal-destination)"), "{policy}");
    // Hosts the rules refused are offered as commented candidates, not dropped; a port refusal is no host's to lift.
    assert!(policy.contains("    # - evil.test  # 2 requests, 2 refused (rule)\n"), "{policy}");
    assert!(!policy.contains("# - docs.test"), "{policy}");
    assert!(policy.contains("\n  tunnel_ports: [443, "), "the tunnel's port: {policy}");
}

#[test]
fn a_suggested_blocklist_blocks_only_what_was_only_ever_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = proxy_log(dir.path());
    let policy = suggest_and_replay(dir.path(), "blocklist", &[&log]);
    assert!(policy.contains("\n  mode: blocklist\n"), "{policy}");
    let evil = entry_line(&policy, "evil.test").unwrap_or_else(|| panic!("{policy}"));
    assert!(evil.contains("# 2 requests, 2 refused (rule)"), "{policy}");
    assert!(entry_line(&policy, "docs.test").is_some(), "{policy}");
    assert!(entry_line(&policy, "a.foo.co.uk").is_none(), "a used host stays reachable: {policy}");
    let out = dir.path().join("suggested-blocklist.yaml");
    let (code, first) = replay(&out, &serde_json::json!({"method": "GET", "host": "evil.test", "port": 80}));
    assert_eq!((code, first.as_str()), (Some(1), "block rule evil.test"));
}

/// A log as `leash run` replays it on stderr in audit mode: warnings around the lines, `would-block` decisions, a
/// lookup by the DNS stub, and a name under bar.co.uk that was only ever refused.
const AUDIT_MODE_LOG: &str = r#" WARN leash: would refuse GET c.bar.co.uk:8080/ (not-allowed)
{"id":1,"time":"2026-01-01T00:00:00.000Z","method":"DNS","host":"c.bar.co.uk","port":53,"path":null,"decision":"allow","rule":null,"reason":"default"}
{"id":2,"time":"2026-01-01T00:00:00.001Z","method":"GET","host":"c.bar.co.uk","port":8080,"path":"/","decision":"would-block","rule":null,"reason":"not-allowed"}
{"id":2,"time":"2026-01-01T00:00:00.002Z","status":200,"bytes_up":80,"bytes_down":3000,"duration_ms":1.0}
{"id":3,"time":"2026-01-01T00:00:00.003Z","method":"CONNECT","host":"d.bar.co.uk","port":8443,"path":null,"decision":"would-block","rule":null,"reason":"port"}
{"id":3,"time":"2026-01-01T00:00:00.004Z","status":200,"bytes_up":500,"bytes_down":700,"duration_ms":9.0}
{"id":4,"time":"2026-01-01T00:00:00.005Z","method":"GET","host":"evil.bar.co.uk","port":80,"path":"/x?k=1","decision":"block","rule":null,"reason":"not-allowed"}
{"id":5,"time":"2026-01-01T00:00:00.006Z","method":"GET","host":"10.0.0.5","port":80,"path":"/","decision":"would-block","rule":null,"reason":"ip-literal"}
{"id":6,"time":"2026-01-01T00:00:00.007Z","method":"GET","host":"intranet.test","port":80,"path":"/","decision":"would-block","rule":null,"reason":"internal-destination"}
{"id":7,"time":"2026-01-01T00:00:00.008Z","method":"DNS","host":"only-looked-up.test","port":53,"path":null,"decision":"allow","rule":null,"reason":"default"}
{"id":8,"time":"2026-01-01T00:00:00.0
leash: 1 command exited with status 0
"#;

#[test]
fn would_block_lines_are_counted_apart_and_junk_lines_are_skipped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "run-stderr.txt", AUDIT_MODE_LOG);
    let o = leash(&["log", "summary", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("skipped 3 lines that are not audit records"), "{}", stderr(&o));
    let out = stdout(&o);
    let c = out.lines().find(|r| r.starts_with("c.bar.co.uk ") && !r.contains(" dns ")).unwrap();
    assert!(c.contains("2.9 KiB") && c.ends_with("would-block: not-allowed 1"), "{out}");
    assert!(out.lines().any(|r| r.starts_with("only-looked-up.test") && r.contains(" dns ")), "{out}");
    let doc = summary_json(&[&log]);
    assert_eq!([&doc["totals"]["would_block"], &doc["totals"]["lookups"]], [4, 2], "{doc}");
    assert_eq!(doc["files"][0]["skipped_lines"], 3);
    assert_eq!(host_row(&doc, "d.bar.co.uk")["bytes_up"], 500);
}

#[test]
fn a_suggestion_from_would_block_lines_lifts_them_but_never_an_address_nor_a_fold_over_a_refused_name() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "run-stderr.txt", AUDIT_MODE_LOG);
    let policy = suggest_and_replay(dir.path(), "allowlist", &[&log]);
    let c = entry_line(&policy, "c.bar.co.uk").unwrap_or_else(|| panic!("{policy}"));
    assert!(
        c.contains("# 1 request, 1 let through that the rules would refuse (would-block: not-allowed)"),
        "{policy}"
    );
    assert!(!c.contains("refused as"), "audit mode refused nothing of it: {policy}");
    assert!(entry_line(&policy, "d.bar.co.uk").is_some(), "{policy}");
    assert!(policy.contains("# not folded into .bar.co.uk: it would also allow evil.bar.co.uk"), "{policy}");
    assert!(policy.contains("\n  ports: [80, 443, 8080]  # 8080: 1 request\n"), "{policy}");
    assert!(policy.contains("\n  tunnel_ports: [443, 8443]  # 8443: 1 tunnel\n"), "{policy}");
    for never in ["10.0.0.5", "intranet.test", "only-looked-up.test", "evil.bar.co.uk"] {
        assert!(entry_line(&policy, never).is_none(), "{never}: {policy}");
    }
    assert!(
        policy.contains("#   10.0.0.5: 1 request, 1 let through that the rules would refuse (would-block: ip-literal)"),
        "{policy}"
    );
}

#[test]
fn unreadable_logs_and_a_non_yaml_output_are_usage_errors() {
    let o = leash(&["log", "summary", "/nonexistent/audit.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read audit log `/nonexistent/audit.jsonl`"), "{}", stderr(&o));
    assert_eq!(leash(&["policy", "suggest", "/nonexistent/audit.jsonl"]).status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    let log = write(dir.path(), "audit.jsonl", "");
    let o = leash(&["policy", "suggest", "--output", "policy.toml", log.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(".yaml or .yml"), "{}", stderr(&o));
}

#[test]
fn the_log_and_policy_help_teach_with_an_example() {
    for sub in [&["log"][..], &["log", "summary"], &["policy"], &["policy", "suggest"]] {
        let o = leash(&[sub, &["--help"]].concat());
        assert_eq!(o.status.code(), Some(0));
        assert!(stdout(&o).contains("Example"), "{sub:?} --help has an example");
    }
}
