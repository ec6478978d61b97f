//! What outlives the decision that let it on — a spliced tunnel, an inspected one, a plain-HTTP request still
//! relaying (a long download, a WebSocket) — registered with the policy handle while it is open, so that a new
//! policy (a switch over the control socket, a SIGHUP reload, ask mode's `always`) is asked about it again: what the
//! new policy would not let on the same way is cut, and the swap counts it.
//!
//! What a request inside an inspected tunnel, or the next request on a keep-alive connection, does needs nothing of
//! this: each is decided on the policy as it is when it comes. Idle pooled upstream connections are dropped by the
//! server on the swap's notice (`PolicyHandle::changes`), never reused under a newer policy anyway (`pool.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use leash_policy::{
    CanonicalPath, ClientHelloFacts, Host, Policy, Question, Request, Scheme, TlsInspection, Verdict, Via,
};
use tokio::sync::Notify;

/// What a connection was let on for, to be decided again under a new policy.
#[derive(Debug, Clone)]
pub(crate) enum Recheck {
    /// A tunnel relayed unread: it stands while the new policy would splice it still (a tunnel the new policy
    /// inspects is cut too: nothing in it was read, and the new policy may refuse paths inside).
    Spliced {
        /// The CONNECT target (a transparent listener's: the server name).
        target: Host,
        port: u16,
        /// What its ClientHello showed.
        hello: Hello,
    },
    /// An inspected tunnel: it stands while its host is not refused (every request in it is decided anew anyway).
    Inspected { host: Host, port: u16 },
    /// A plain-HTTP request still relaying: it stands while the new policy allows it.
    Request { scheme: Scheme, host: Host, port: u16, path: CanonicalPath },
}

/// [`ClientHelloFacts`], owned.
#[derive(Debug, Clone)]
pub(crate) enum Hello {
    ServerName(Box<str>),
    NoServerName,
    BadServerName,
    Ech,
    NotTls,
}

impl Hello {
    pub fn of(facts: ClientHelloFacts<'_>) -> Hello {
        match facts {
            ClientHelloFacts::ServerName(name) => Hello::ServerName(name.into()),
            ClientHelloFacts::NoServerName => Hello::NoServerName,
            ClientHelloFacts::BadServerName => Hello::BadServerName,
            ClientHelloFacts::Ech => Hello::Ech,
            ClientHelloFacts::NotTls => Hello::NotTls,
        }
    }

    fn facts(&self) -> ClientHelloFacts<'_> {
        match self {
            Hello::ServerName(name) => ClientHelloFacts::ServerName(name),
            Hello::NoServerName => ClientHelloFacts::NoServerName,
            Hello::BadServerName => ClientHelloFacts::BadServerName,
            Hello::Ech => ClientHelloFacts::Ech,
            Hello::NotTls => ClientHelloFacts::NotTls,
        }
    }
}

impl Recheck {
    /// Whether `policy` would let this on as it was let on.
    pub fn stands(&self, policy: &Policy, tls: TlsInspection) -> bool {
        match self {
            Recheck::Spliced { target, port, hello } => {
                let question = Question::ClientHello { target, port: *port, hello: hello.facts() };
                matches!(policy.decide(&question, tls).verdict, Verdict::Allow | Verdict::WouldBlock)
            }
            Recheck::Inspected { host, port } => {
                let name = host.as_str();
                let hello = ClientHelloFacts::ServerName(&name);
                policy.decide(&Question::ClientHello { target: host, port: *port, hello }, tls).verdict
                    != Verdict::Block
            }
            Recheck::Request { scheme, host, port, path } => {
                let request = Request { via: Via::ForwardProxy, scheme: *scheme, host, port: *port, path };
                policy.decide(&Question::Request(request), tls).verdict != Verdict::Block
            }
        }
    }
}

/// One open connection's entry: what to ask again, and how to tell it it is cut.
struct Entry {
    recheck: Recheck,
    tls: TlsInspection,
    cut: Arc<Notify>,
}

/// Every registered connection, by a number of its own.
#[derive(Default)]
pub(crate) struct Standing {
    next: u64,
    open: HashMap<u64, Entry>,
}

impl Standing {
    /// Add an entry; its number, for [`Standing::forget`].
    pub fn add(&mut self, recheck: Recheck, tls: TlsInspection, cut: Arc<Notify>) -> u64 {
        let id = self.next;
        self.next += 1;
        self.open.insert(id, Entry { recheck, tls, cut });
        id
    }

    pub fn forget(&mut self, id: u64) {
        self.open.remove(&id);
    }

    /// Cut every entry `policy` refuses (they are forgotten); how many.
    pub fn cut_refused(&mut self, policy: &Policy) -> usize {
        let before = self.open.len();
        self.open.retain(|_, entry| {
            let stands = entry.recheck.stands(policy, entry.tls);
            if !stands {
                entry.cut.notify_one();
            }
            stands
        });
        before - self.open.len()
    }
}

/// The registry, locked: a poisoned lock only means a swap panicked mid-sweep; the registry itself is still whole.
pub(crate) fn lock(standing: &Mutex<Standing>) -> MutexGuard<'_, Standing> {
    standing.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's place among the registered ones, held while it is open (dropping it forgets the entry).
pub(crate) struct Registration {
    /// Its number in `standing`; `None` when it was cut before it was added.
    pub(crate) id: Option<u64>,
    pub(crate) cut: Arc<Notify>,
    pub(crate) standing: Arc<Mutex<Standing>>,
}

impl Registration {
    /// Completes once a new policy refused the connection (at once, if it did before this is awaited).
    pub async fn cut(&self) {
        self.cut.notified().await;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&self.standing).forget(id);
        }
    }
}

/// Run `work` until it ends, or until `standing` (if any) is cut: then `work` is dropped, and its sockets with it
/// (the client reads the end of the stream). `None` when it was cut.
pub(crate) async fn until_cut<T>(work: impl Future<Output = T>, standing: Option<&Registration>) -> Option<T> {
    let Some(registration) = standing else { return Some(work.await) };
    tokio::select! {
        ended = work => Some(ended),
        () = registration.cut() => None,
    }
}

#[cfg(test)]
mod tests {
    use leash_policy::{load, parse_host, Format};

    use super::*;

    fn policy(yaml: &str) -> Policy {
        load(yaml, Format::Yaml, None).unwrap().policy
    }

    fn spliced(host: &str) -> Recheck {
        let target = parse_host(host).unwrap();
        Recheck::Spliced { target, port: 443, hello: Hello::ServerName(host.into()) }
    }

    #[test]
    fn a_spliced_tunnel_stands_only_while_the_new_policy_would_splice_it_still() {
        let tls = TlsInspection::Available;
        let open = policy("network:\n  mode: allowlist\n  allowed_hosts: [a.test]\n");
        let narrowed = policy("network:\n  mode: allowlist\n  allowed_urls: [a.test/v1/]\n");
        let other = policy("network:\n  mode: allowlist\n  allowed_hosts: [b.test]\n");
        assert!(spliced("a.test").stands(&open, tls));
        assert!(!spliced("a.test").stands(&other, tls), "refused");
        assert!(!spliced("a.test").stands(&narrowed, tls), "inspected now: what it carried was never read");
    }

    #[test]
    fn a_swap_cuts_and_counts_exactly_what_the_new_policy_refuses() {
        let mut standing = Standing::default();
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        standing.add(spliced("a.test"), TlsInspection::Available, a.clone());
        let kept = standing.add(spliced("b.test"), TlsInspection::Available, b.clone());
        let cut = standing.cut_refused(&policy("network:\n  mode: allowlist\n  allowed_hosts: [b.test]\n"));
        assert_eq!(cut, 1);
        assert_eq!(standing.open.keys().copied().collect::<Vec<_>>(), [kept]);
        let notified = |n: &Notify| {
            let waiting = n.notified();
            tokio::pin!(waiting);
            waiting.as_mut().enable()
        };
        assert!(notified(&a), "a.test was told");
        assert!(!notified(&b), "b.test was not");
    }
}
