//! Where the init runs while leash and the init build the sandbox side by side: on another CPU than leash's.
//!
//! After the clone, leash writes the CA files and builds its runtime while the init creates the namespaces;
//! each is about a millisecond of CPU. The scheduler, though, mostly queues a forked child on its parent's CPU and
//! leaves it there until the parent sleeps, even when another CPU is idle: the two halves then ran one after the
//! other (traced on the reference machine: the init's first instruction came a millisecond after the clone, once
//! leash had finished). So leash moves the init to its other CPUs right after the clone, and the init moves itself
//! if it ran first on leash's CPU; once leash says go, the init takes back leash's affinity, so the command starts
//! with exactly the CPUs leash had.

use libc::{cpu_set_t, pid_t};

use super::sys::{self, SysResult};

/// The affinity leash had, and the CPU it ran on, when it built the plan.
#[derive(Clone, Copy)]
pub(super) struct Spread {
    all: cpu_set_t,
    parent: u32,
}

impl Spread {
    /// `None` when the affinity or the CPU cannot be read, or there is no other CPU to move to.
    pub(super) fn of_caller() -> Option<Spread> {
        let spread = Spread { all: sys::affinity().ok()?, parent: sys::current_cpu().ok()? };
        spread.others().map(|_| spread)
    }

    /// Leash's CPUs but the one it ran on; `None` if that leaves none.
    fn others(&self) -> Option<cpu_set_t> {
        let mut others = self.all;
        let parent = usize::try_from(self.parent).ok().filter(|&cpu| cpu < libc::CPU_SETSIZE as usize)?;
        // SAFETY: CPU_CLR only clears one bit of the set; `parent` is below CPU_SETSIZE.
        unsafe { libc::CPU_CLR(parent, &mut others) };
        // SAFETY: CPU_COUNT only reads the set's bits.
        let left = unsafe { libc::CPU_COUNT(&others) };
        (left > 0).then_some(others)
    }

    /// In leash, right after the clone: moves a still-queued init off leash's CPU. Only a hint to the scheduler, so
    /// a failure is ignored.
    pub(super) fn move_init(&self, init: pid_t) {
        if let Some(others) = self.others() {
            let _ = sys::set_affinity(init, &others);
        }
    }

    /// In the init, first thing: if it runs on leash's CPU (it took the CPU at the clone), it moves away. A hint too.
    pub(super) fn leave_parent_cpu(&self) {
        if sys::current_cpu() == Ok(self.parent) {
            self.move_init(0);
        }
    }

    /// In the init, once leash is done with `move_init` (it has said go): back to leash's whole affinity, which the
    /// command inherits.
    pub(super) fn restore(&self) -> SysResult<()> {
        sys::set_affinity(0, &self.all)
    }
}
