//! The policy in force and its versions: one handle shared by every door, swapped whole (a reload on SIGHUP, a
//! switch over the control socket, ask mode's `always`), read as one snapshot per request. A swap also asks the new
//! policy again about every connection that outlived the decision letting it on (`standing.rs`) and cuts those it
//! refuses, and tells whoever watches ([`PolicyHandle::changes`]: the pools of idle upstream connections).

use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use leash_policy::{Policy, TlsInspection};
use tokio::sync::{watch, Notify};

use crate::standing::{Recheck, Registration, Standing};

/// The policy in force. `store` replaces it atomically; each request decides on one snapshot.
#[derive(Clone)]
pub struct PolicyHandle(Arc<Inner>);

struct Inner {
    current: ArcSwap<Snapshot>,
    /// The open connections to ask again at a swap. Swaps take this lock too, so a connection registering is either
    /// seen by a swap's sweep or sees the swap's generation itself.
    standing: Arc<Mutex<Standing>>,
    /// The generation in force, for those who act on a swap.
    changed: watch::Sender<u64>,
}

/// One version of the policy. `generation` grows with every swap, so state built under an older policy (pooled
/// upstream connections) is never used under a newer one.
#[derive(Debug)]
pub struct Snapshot {
    /// The policy itself.
    pub policy: Policy,
    /// 0 for the policy leash started with, one more for each swap.
    pub generation: u64,
}

impl std::ops::Deref for Snapshot {
    type Target = Policy;
    fn deref(&self) -> &Policy {
        &self.policy
    }
}

/// What a swap did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swapped {
    /// The new policy's generation.
    pub generation: u64,
    /// The open tunnels and requests in flight it cut, as the new policy refuses them.
    pub cut: usize,
}

impl PolicyHandle {
    /// A handle on `policy`, generation 0.
    pub fn new(policy: Policy) -> Self {
        Self(Arc::new(Inner {
            current: ArcSwap::from_pointee(Snapshot { policy, generation: 0 }),
            standing: Arc::default(),
            changed: watch::Sender::new(0),
        }))
    }

    /// The policy as it is now; a request holds this snapshot from decision to end.
    pub fn current(&self) -> Arc<Snapshot> {
        self.0.current.load_full()
    }

    /// Replace the policy for every request decided from now on, and cut every open tunnel and request in flight it
    /// refuses: a spliced tunnel it refuses or would inspect, an inspected tunnel to a host it refuses, a plain-HTTP
    /// request still relaying that it refuses. A policy in force inside a boundary (`--boundary`) stays inside it:
    /// the new one is held inside the same boundary, or refused (with every reason) and the old one kept.
    pub fn store(&self, policy: Policy) -> Result<Swapped, String> {
        let policy = match (policy.boundary(), self.0.current.load().policy.boundary()) {
            // INVARIANT: no reload, `always` answer or switch takes a policy out of its boundary.
            (None, Some(boundary)) => policy.within(boundary.clone()).map_err(|problems| problems.join("; "))?,
            _ => policy,
        };
        let mut standing = self.standing();
        let generation = self.0.current.load().generation + 1;
        let snapshot = Arc::new(Snapshot { policy, generation });
        self.0.current.store(snapshot.clone());
        let cut = standing.cut_refused(&snapshot.policy);
        drop(standing);
        self.0.changed.send_replace(generation);
        Ok(Swapped { generation, cut })
    }

    /// The generation in force, changing with each swap.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Register a connection let on under `decided` (with `tls`), to be asked again at each swap. If a swap came
    /// since `decided`, it is asked now, and cut at once when refused.
    pub(crate) fn register(&self, recheck: Recheck, decided: &Snapshot, tls: TlsInspection) -> Registration {
        let cut = Arc::new(Notify::new());
        let mut standing = self.standing();
        let now = self.0.current.load();
        let id = match now.generation == decided.generation || recheck.stands(&now.policy, tls) {
            true => Some(standing.add(recheck, tls, cut.clone())),
            false => {
                cut.notify_one();
                None
            }
        };
        Registration { id, cut, standing: self.0.standing.clone() }
    }

    fn standing(&self) -> MutexGuard<'_, Standing> {
        crate::standing::lock(&self.0.standing)
    }
}

#[cfg(test)]
mod tests {
    use leash_policy::{load, parse_host, Format};

    use super::*;
    use crate::standing::Hello;

    fn allowing(host: &str) -> Policy {
        load(&format!("network:\n  mode: allowlist\n  allowed_hosts: [{host}]\n"), Format::Yaml, None).unwrap().policy
    }

    fn tunnel_to(host: &str) -> Recheck {
        Recheck::Spliced { target: parse_host(host).unwrap(), port: 443, hello: Hello::ServerName(host.into()) }
    }

    fn is_cut(registration: &Registration) -> bool {
        let waiting = registration.cut.notified();
        tokio::pin!(waiting);
        waiting.as_mut().enable()
    }

    #[test]
    fn a_connection_decided_before_a_swap_but_registered_after_it_is_asked_again_at_once() {
        let handle = PolicyHandle::new(allowing("a.test"));
        let decided = handle.current();
        let swapped = handle.store(allowing("b.test")).unwrap();
        assert_eq!(swapped, Swapped { generation: 1, cut: 0 }, "nothing was registered yet");
        let late = handle.register(tunnel_to("a.test"), &decided, TlsInspection::Available);
        assert!(is_cut(&late), "a.test was decided on the old policy, which the new one does not keep");
        let still = handle.register(tunnel_to("b.test"), &decided, TlsInspection::Available);
        assert!(!is_cut(&still), "b.test stands under the new policy");
        assert_eq!(
            handle.store(allowing("c.test")).unwrap().cut,
            1,
            "b.test was registered, and is cut by the next swap"
        );
        drop((late, still));
        assert_eq!(handle.store(allowing("d.test")).unwrap().cut, 0, "a dropped registration is forgotten");
    }
}
