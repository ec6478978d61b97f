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
    /// request still relaying that it refuses.
    pub fn store(&self, policy: Policy) -> Swapped {
        let mut standing = self.standing();
        let generation = self.0.current.load().generation + 1;
        let snapshot = Arc::new(Snapshot { policy, generation });
        self.0.current.store(snapshot.clone());
        let cut = standing.cut_refused(&snapshot.policy);
        drop(standing);
        self.0.changed.send_replace(generation);
        Swapped { generation, cut }
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
