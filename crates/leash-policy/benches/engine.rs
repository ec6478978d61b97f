//! The engine's benchmark: load a 100,000-entry blocklist (YAML text, as the proxy reads it at start and on SIGHUP)
//! and decide one request against it, a hit and a miss. Targets: load < 200 ms, decide < 1 µs median. The same
//! blocklist with exceptions (`allowed_hosts`, `allowed_urls`) is decided too: a request an exception decides, one
//! its blocked entry does, and one neither names.
//! Run: `cargo bench -p leash-policy` (add `-- --quick` for a short run). The `decide-cpu` group measures the same
//! decisions in CPU time (see [`ThreadCpu`]): on a shared machine wall time varies 2× from run to run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a failed setup stops the benchmark")]

use std::hint::black_box;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion};
use leash_policy::{load, parse_absolute_target, Format, Question, TlsInspection};

/// Entries in the large policy: the figure.
const ENTRIES: usize = 100_000;

/// 90,000 path rules over 1,000 hosts and 10,000 host rules: the shape of a large scraped blocklist.
fn big_blocklist() -> String {
    let mut text = String::from("network:\n  mode: blocklist\n  blocked_urls:\n");
    for i in 0..ENTRIES {
        let line = match i % 10 {
            0 => format!("    - host{i}.example.org\n"),
            _ => format!("    - site{}.example.com/abs/{:05}.{:05}\n", i % 1000, i / 1000, i),
        };
        text.push_str(&line);
    }
    text
}

fn bench_load(c: &mut Criterion) {
    let text = big_blocklist();
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    group.bench_function("100k blocked_urls (yaml)", |b| {
        // The old policy's drop is not part of loading (the proxy drops it after the swap); keep it out.
        b.iter_with_large_drop(|| load(black_box(&text), Format::Yaml, None).unwrap())
    });
    group.finish();
}

/// The CPU time of the benchmark's thread (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds): what a decision costs, leaving
/// out the time other processes take the CPU away, which wall time counts.
struct ThreadCpu;

/// Nanoseconds are shown as wall time's are.
static WALL: WallTime = WallTime;

fn on_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap()
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        on_cpu_ns()
    }
    fn end(&self, started: u64) -> u64 {
        on_cpu_ns().saturating_sub(started)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}

fn bench_decide(c: &mut Criterion) {
    decide_group(c, "decide");
}

fn bench_decide_cpu(c: &mut Criterion<ThreadCpu>) {
    decide_group(c, "decide-cpu");
}

fn decide_group<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let policy = load(&big_blocklist(), Format::Yaml, None).unwrap().policy;
    let mut group = c.benchmark_group(name);
    for (name, url) in [
        ("hit (path rule)", "http://www.site7.example.com/abs/00012.12007v2"),
        ("miss (same host)", "http://www.site7.example.com/abs/00012.12008"),
        ("miss (other host)", "http://api.example.net/v1/models"),
    ] {
        let target = parse_absolute_target(url).unwrap();
        let question = Question::of_request("GET", &target);
        group.bench_function(name, |b| b.iter(|| policy.decide(black_box(&question), TlsInspection::Available)));
    }
    // The same miss inside a boundary (`--boundary`): the boundary decides first, then the run's policy.
    let boundary =
        load("network:\n  mode: blocklist\n  blocked_urls: [evil.example.org]\n", Format::Yaml, None).unwrap();
    let boundary = std::sync::Arc::new(leash_policy::Boundary::new(boundary.policy, "b").unwrap());
    let bounded = load(&big_blocklist(), Format::Yaml, None).unwrap().policy.within(boundary).unwrap();
    let target = parse_absolute_target("http://www.site7.example.com/abs/00012.12008").unwrap();
    let question = Question::of_request("GET", &target);
    group.bench_function("miss (same host) inside a boundary", |b| {
        b.iter(|| bounded.decide(black_box(&question), TlsInspection::Available))
    });
    // What the proxy pays per request before deciding: parse the target, canonicalise its path.
    group.bench_function("parse + canonicalise + decide", |b| {
        b.iter(|| {
            let target =
                parse_absolute_target(black_box("http://www.site7.example.com/abs/%30%30012.12007?x=1")).unwrap();
            policy.decide(&Question::of_request("GET", &target), TlsInspection::Available)
        })
    });
    group.finish();
}

/// The large blocklist with 1,000 exact exceptions under its blocked hosts and 1,000 path exceptions under its path
/// rules' hosts.
fn big_blocklist_with_exceptions() -> String {
    let mut text = big_blocklist();
    text.push_str("  allowed_hosts:\n");
    for i in 0..1000 {
        text.push_str(&format!("    - jira.host{}.example.org\n", i * 10));
    }
    text.push_str("  allowed_urls:\n");
    for i in 0..1000 {
        text.push_str(&format!("    - www.site{i}.example.com/abs/public/\n"));
    }
    text
}

fn bench_decide_with_exceptions(c: &mut Criterion) {
    let policy = load(&big_blocklist_with_exceptions(), Format::Yaml, None).unwrap().policy;
    let mut group = c.benchmark_group("decide with exceptions");
    for (name, url) in [
        ("allowed by an exception", "http://jira.host70.example.org/browse/X-1"),
        ("blocked around it", "http://mail.host70.example.org/"),
        ("path exception", "http://www.site7.example.com/abs/public/x"),
        ("hit (path rule)", "http://www.site7.example.com/abs/00012.12007v2"),
        ("miss (other host)", "http://api.example.net/v1/models"),
    ] {
        let target = parse_absolute_target(url).unwrap();
        let question = Question::of_request("GET", &target);
        group.bench_function(name, |b| b.iter(|| policy.decide(black_box(&question), TlsInspection::Available)));
    }
    group.finish();
}

criterion_group!(benches, bench_load, bench_decide, bench_decide_with_exceptions);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench_decide_cpu
}
criterion_main!(benches, cpu);
