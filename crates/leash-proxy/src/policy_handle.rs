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

    /// Replace the policy for every request decided from now on. A policy in force inside a boundary
    /// (`--boundary`) stays inside it: the new one is held inside the same boundary, or refused (with every reason)
    /// and the old one kept.
    pub fn store(&self, policy: Policy) -> Result<(), String> {
        let current = self.0.load();
        let policy = match (policy.boundary(), current.policy.boundary()) {
            // INVARIANT: no reload, `always` answer or switch takes a policy out of its boundary.
            (None, Some(boundary)) => policy.within(boundary.clone()).map_err(|problems| problems.join("; "))?,
            _ => policy,
        };
        self.0.store(Arc::new(Snapshot { policy, generation: current.generation + 1 }));
        Ok(())
    }
}
