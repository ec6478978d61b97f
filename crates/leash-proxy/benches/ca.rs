//! Leaf issuance by the per-run inspection CA: what the first inspected tunnel to a name pays (a new P-256
//! key, a certificate signed by the CA, the rustls signing key), and what every later tunnel to it pays (an LRU
//! lookup). Targets: first use < 2 ms median, cached reuse < 20 µs.
//! Run: `cargo bench -p leash-proxy --bench ca` (add `-- --quick` for a short run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a failed setup stops the benchmark")]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use leash_proxy::ca::CertAuthority;

fn bench_leaf(c: &mut Criterion) {
    let ca = CertAuthority::generate().unwrap();
    let mut group = c.benchmark_group("leaf");
    // A fresh name every iteration, so every call issues. The cache is bounded (LEAF_CACHE = 1,024), so after the
    // first thousand iterations each issuance also evicts the least recently used leaf, as it would in a long run
    // against endless distinct names.
    let mut n = 0u64;
    group.bench_function("first use (new name)", |b| {
        b.iter(|| {
            n += 1;
            ca.leaf(black_box(&format!("h{n}.a.b.example.com"))).unwrap()
        })
    });
    // The same name: the lookup every later tunnel to an inspected host pays.
    ca.leaf("api.example.com").unwrap();
    group.bench_function("cached (same name)", |b| b.iter(|| ca.leaf(black_box("api.example.com")).unwrap()));
    group.finish();
}

fn bench_ca(c: &mut Criterion) {
    // Once per run, at start: the CA's own key and self-signed certificate.
    let mut group = c.benchmark_group("ca");
    group.bench_function("generate", |b| b.iter(|| CertAuthority::generate().unwrap()));
    group.finish();
}

criterion_group!(benches, bench_leaf, bench_ca);
criterion_main!(benches);
