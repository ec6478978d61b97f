//! The policy in force and its versions: one handle shared by every door, swapped whole on reload (SIGHUP), read
//! as one snapshot per request.

use std::sync::Arc;

use arc_swap::ArcSwap;
use leash_policy::Policy;

/// The policy in force. `store` replaces it atomically (SIGHUP reload); each request decides on one snapshot.
#[derive(Clone)]
pub struct PolicyHandle(Arc<ArcSwap<Snapshot>>);

/// One version of the policy. `generation` grows with every reload, so state built under an older policy (pooled
/// upstream connections) is never used under a newer one.
#[derive(Debug)]
pub struct Snapshot {
    /// The policy itself.
    pub policy: Policy,
    /// 0 for the policy leash started with, one more for each reload.
    pub generation: u64,
}

impl std::ops::Deref for Snapshot {
    type Target = Policy;
    fn deref(&self) -> &Policy {
        &self.policy
    }
}

impl PolicyHandle {
    /// A handle on `policy`, generation 0.
    pub fn new(policy: Policy) -> Self {
        Self(Arc::new(ArcSwap::from_pointee(Snapshot { policy, generation: 0 })))
    }

    /// The policy as it is now; a request holds this snapshot from decision to end.
    pub fn current(&self) -> Arc<Snapshot> {
        self.0.load_full()
    }

    /// Replace the policy for every request decided from now on.
    pub fn store(&self, policy: Policy) {
        let generation = self.0.load().generation + 1;
        self.0.store(Arc::new(Snapshot { policy, generation }));
    }
}
