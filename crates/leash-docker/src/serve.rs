//! Serving a container from outside: the sockets of a `leash_proxy::inside::Plan` bound inside its network namespace
//! (the proxy's listener, the DNS stub's socket, the transparent and service listeners), served until the container
//! ends or a stop signal comes, and the signals leash takes over for that time.

use leash_proxy::inside::{Bound, Plan};
use leash_proxy::ProxyConfig;
use tokio::signal::unix::{signal, SignalKind};

pub use leash_proxy::inside::{DNS_INSIDE, PROXY_INSIDE};

/// Binds `plan`'s sockets inside the network namespace of `pid`, which must hold only `lo`.
pub fn bind_inside(pid: u32, plan: &Plan) -> Result<Bound, leash_sandbox::SandboxError> {
    let netns = leash_sandbox::Netns::Process(pid);
    bind_in_namespace(&netns, &leash_sandbox::Isolation::default(), plan)
}

/// [`bind_inside`] for any network namespace, checked as `isolation` says. The building block of `leash attach` and
/// `leash docker`.
pub fn bind_in_namespace(
    netns: &leash_sandbox::Netns,
    isolation: &leash_sandbox::Isolation,
    plan: &Plan,
) -> Result<Bound, leash_sandbox::SandboxError> {
    let sockets = leash_sandbox::bind_in(netns, isolation, &plan.tcp(), &plan.udp())?;
    plan.take(sockets.tcp, sockets.udp).map_err(|e| leash_sandbox::SandboxError::InvalidSpec(e.to_string()))
}

/// Serves `inside` until `ended` resolves (its value returned) or a stop signal arrives. On a signal, `on_signal`
/// runs (stopping the container) and serving goes on until `ended`; without `on_signal` serving stops at once and the
/// result is `None`. Then drains in-flight requests and flushes the log.
pub async fn serve_until<T>(
    inside: Bound,
    config: ProxyConfig,
    mut ended: tokio::sync::oneshot::Receiver<T>,
    stop: &mut StopSignals,
    on_signal: Option<impl FnOnce()>,
) -> Option<T> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(inside.serve(config, async move {
        let _ = stop_rx.await;
    }));
    let result = tokio::select! {
        r = &mut ended => r.ok(),
        () = stop.recv() => match on_signal {
            Some(f) => {
                f();
                (&mut ended).await.ok()
            }
            None => None,
        }
    };
    let _ = stop_tx.send(());
    let _ = serving.await;
    result
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal), taken over for the whole run: they stop the container (run) or
/// the serving (attach) instead of killing leash, which then cleans up.
pub struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Takes the three signals over; from now on they wait for [`StopSignals::recv`].
    pub fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next stop signal (one that arrived before the call included).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {},
            _ = self.term.recv() => {},
            _ = self.hup.recv() => {},
        }
    }
}
