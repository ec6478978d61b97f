//! The Prometheus metrics over real sockets: a proxy in front of a real origin takes allowed, refused and failing
//! requests, and its metrics endpoint, scraped like Prometheus does, counts each where the audit log puts it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test's helpers fail it by panicking")]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::client::exchange;
use support::origin::dead_port;
use support::*;
use tokio::net::TcpListener;

/// Between two scrapes while waiting for a gauge to move (a condition wait, bounded by [`support::STEP`]).
const SCRAPE_POLL: Duration = Duration::from_millis(10);

/// The metrics endpoint of `leash`, on a port of its own.
async fn endpoint(leash: &Leash) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving =
        leash_proxy::serve_metrics(listener, leash.metrics.clone(), leash.policy.clone(), std::future::pending());
    tokio::spawn(serving);
    addr
}

/// `GET /metrics` as a scraper sends it; the body, after checking the answer is the exposition format.
async fn scrape(endpoint: SocketAddr) -> String {
    let r = exchange(endpoint, "GET /metrics HTTP/1.1\r\nHost: leash\r\nAccept: text/plain\r\n\r\n").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    r.text()
}

/// The value of the sample `series` (name and labels, as rendered); 0 when it is not shown yet.
fn value(text: &str, series: &str) -> f64 {
    let line = text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')));
    line.map_or(0.0, |v| v.parse().unwrap())
}

/// Scrape until `series` has `wanted` (a gauge follows connections the proxy closes on its own time).
async fn until(endpoint: SocketAddr, series: &str, wanted: f64) {
    within(&format!("{series} to be {wanted}"), async {
        while value(&scrape(endpoint).await, series) != wanted {
            tokio::time::sleep(SCRAPE_POLL).await;
        }
    })
    .await;
}

/// Wait until the audit log holds `n` outcome lines.
async fn outcomes_logged(leash: &Leash, n: usize) {
    within(&format!("{n} outcome lines"), async {
        while leash.log().iter().filter(|v| v.get("status").is_some()).count() < n {
            tokio::time::sleep(SCRAPE_POLL).await;
        }
    })
    .await;
}

/// The `leash_decisions_total` series of these labels.
fn decisions(kind: &str, decision: &str, reason: &str) -> String {
    format!("leash_decisions_total{{kind=\"{kind}\",decision=\"{decision}\",reason=\"{reason}\"}}")
}

#[tokio::test]
async fn allowed_refused_and_failed_requests_are_counted_where_the_log_puts_them() {
    let dead = dead_port().await;
    let w = World::new(|p| allowlist(&["allowed.test"], &[p, dead], &[443])).await;
    let metrics = endpoint(&w.leash).await;
    assert_eq!(w.get("allowed.test", "/a").await.status, 200);
    assert_eq!(w.get("allowed.test", "/b").await.status, 200);
    assert_refused(&w.get("other.test", "/").await, 403, "not-allowed");
    let connect = "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n";
    assert_refused(&w.send(connect).await, 403, "not-allowed");
    let failed = w.send(support::get(&format!("http://allowed.test:{dead}/"))).await;
    assert_eq!(failed.status, 502);
    // Outcomes are counted as their lines are written, after the answer: wait for the last of them.
    outcomes_logged(&w.leash, 3).await;
    let text = scrape(metrics).await;
    assert_eq!(value(&text, &decisions("http", "allow", "rule")), 3.0, "{text}");
    assert_eq!(value(&text, &decisions("http", "block", "not-allowed")), 1.0, "{text}");
    assert_eq!(value(&text, &decisions("tunnel", "block", "not-allowed")), 1.0, "{text}");
    assert_eq!(text.matches("\nleash_decisions_total{").count(), 3, "only series seen are shown: {text}");
    assert_eq!(value(&text, "leash_upstream_failures_total{error=\"refused\"}"), 1.0, "{text}");
    assert_eq!(value(&text, "leash_upstream_failures_total{error=\"reset\"}"), 0.0, "{text}");
    assert_eq!(value(&text, "leash_request_duration_seconds_count"), 3.0, "{text}");
    assert_eq!(value(&text, "leash_request_duration_seconds_bucket{le=\"+Inf\"}"), 3.0, "{text}");
    let body = "hello from upstream".len() as f64;
    assert!(value(&text, "leash_bytes_total{direction=\"down\"}") >= 2.0 * body, "{text}");
    assert!(value(&text, "leash_bytes_total{direction=\"up\"}") > 0.0, "{text}");
    assert_eq!(value(&text, "leash_audit_write_failures_total"), 0.0, "{text}");
    assert_eq!(value(&text, "leash_policy_generation"), 0.0, "{text}");
    assert!(text.contains(&format!("leash_build_info{{version=\"{}\"}} 1\n", env!("CARGO_PKG_VERSION"))), "{text}");
}

#[tokio::test]
async fn the_gauges_follow_open_connections_and_reloads() {
    let w = World::new(|p| allowlist(&["allowed.test"], &[p], &[443])).await;
    let metrics = endpoint(&w.leash).await;
    let held = Raw::connect(w.leash.addr).await;
    until(metrics, "leash_connections_open", 1.0).await;
    drop(held);
    until(metrics, "leash_connections_open", 0.0).await;
    w.leash.reload(&allowlist(&["other.test"], &[w.port()], &[443]));
    assert_eq!(value(&scrape(metrics).await, "leash_policy_generation"), 1.0);
}

#[tokio::test]
async fn a_decision_that_cannot_be_logged_is_counted_as_the_503_it_got() {
    let up = Upstream::start().await;
    let leash = Leash::builder(&allowlist(&["allowed.test"], &[up.port()], &[443]))
        .audit_at(std::path::Path::new("/dev/full"))
        .start()
        .await;
    let metrics = endpoint(&leash).await;
    let r = exchange(leash.addr, support::get(&format!("http://allowed.test:{}/", up.port()))).await;
    assert_refused(&r, 503, "audit-failed");
    let text = scrape(metrics).await;
    assert_eq!(value(&text, "leash_audit_write_failures_total"), 1.0, "{text}");
    assert_eq!(value(&text, &decisions("http", "block", "audit-failed")), 1.0, "{text}");
    assert_eq!(value(&text, &decisions("http", "allow", "rule")), 0.0, "{text}");
}

#[tokio::test]
async fn the_endpoint_serves_only_get_metrics() {
    let leash = Leash::start(&allowlist(&["allowed.test"], &[80], &[443])).await;
    let metrics = endpoint(&leash).await;
    let r = exchange(metrics, "GET / HTTP/1.1\r\nHost: leash\r\n\r\n").await;
    assert_eq!(r.status, 404);
    let r = exchange(metrics, "POST /metrics HTTP/1.1\r\nHost: leash\r\nContent-Length: 0\r\n\r\n").await;
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    let r = exchange(metrics, "GET /metrics HTTP/1.1\r\nHost: leash\r\nbad header\r\n\r\n").await;
    assert_eq!(r.status, 400);
    assert!(scrape(metrics).await.contains("# TYPE leash_decisions_total counter\n"));
}

/// Ask mode: wait (bounded) until the question about `host` is open; its id.
async fn question_about(leash: &Leash, host: &str) -> u64 {
    let asking = leash.ask.as_ref().expect("the proxy asks");
    within(&format!("a question about {host}"), async {
        loop {
            if let Some(q) = asking.pending().into_iter().find(|q| q.host == host) {
                return q.id;
            }
            tokio::time::sleep(SCRAPE_POLL).await;
        }
    })
    .await
}

#[tokio::test]
async fn ask_mode_counts_open_questions_and_each_answer_once_closed() {
    use leash_proxy::ask::{Answer, AnsweredBy};
    let up = Upstream::start().await;
    let yaml = allowlist(&["allowed.test"], &[up.port()], &[443]).replace("mode: allowlist", "mode: ask");
    let leash = Leash::builder(&yaml).asking(Duration::from_secs(1)).start().await;
    let metrics = endpoint(&leash).await;
    let asking = leash.ask.clone().unwrap();
    let send = |host: &str| {
        let (addr, url) = (leash.addr, format!("http://{host}:{}/", up.port()));
        tokio::spawn(async move { exchange(addr, support::get(&url)).await })
    };
    assert_eq!(value(&scrape(metrics).await, "leash_ask_pending"), 0.0);
    for (host, answer, status) in [("once.test", Answer::Once, 200), ("deny.test", Answer::Deny, 403)] {
        let held = send(host);
        let id = question_about(&leash, host).await;
        let text = scrape(metrics).await;
        assert_eq!(value(&text, "leash_ask_pending"), 1.0, "one question open: {text}");
        asking.answer(id, answer, None, AnsweredBy::Socket).unwrap();
        assert_eq!(within("the held request's answer", held).await.unwrap().status, status, "{host}");
    }
    // Nobody answers this one: refused after the 1 s timeout.
    let held = send("late.test");
    question_about(&leash, "late.test").await;
    assert_refused(&within("the timeout", held).await.unwrap(), 403, "ask-timeout");
    let text = scrape(metrics).await;
    assert_eq!(value(&text, "leash_ask_pending"), 0.0, "{text}");
    for (answer, n) in [("once", 1.0), ("deny", 1.0), ("timeout", 1.0), ("run", 0.0), ("always", 0.0)] {
        assert_eq!(value(&text, &format!("leash_ask_answers_total{{answer=\"{answer}\"}}")), n, "{answer}: {text}");
    }
    assert_eq!(value(&text, "leash_ask_answer_seconds_count"), 3.0, "{text}");
    assert!(value(&text, "leash_ask_answer_seconds_sum") >= 1.0, "the timeout alone was open 1 s: {text}");
}
