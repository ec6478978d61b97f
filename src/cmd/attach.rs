//! `leash attach`: serve leash's proxy inside a network namespace leash did not make — a microVM's tap namespace, a
//! pod's, another runtime's container — by binding the listener there and serving it from leash's own namespace.
//! The namespace is checked first (`leash_sandbox::bind_in`): one with another way out is refused. It is served
//! until a stop signal, or until it is gone. With `--dir`, many namespaces at once (`attach_dir.rs`, dispatched by
//! `main.rs`); what both do to one namespace is in `shared/attach.rs`.

use std::sync::Arc;

use leash_docker::serve::{serve_until, StopSignals};
use leash_proxy::Inspection;
use leash_sandbox::{Isolation, Netns};

use crate::cli::AttachArgs;
use crate::exit::{Exit, Failure};
use crate::shared::attach::{attach, emptied, gone, harden, Target};
use crate::shared::sandboxed::{config, proxy_parts, with_stop_signals, ProxyParts};

pub fn run(args: AttachArgs) -> Result<Exit, Failure> {
    harden()?;
    let netns = match (&args.netns, args.pid) {
        (Some(path), _) => Netns::Path(path.clone()),
        (None, Some(pid)) => Netns::Process(pid),
        (None, None) => return Err(usage("give --netns PATH, --pid PID or --dir DIR")),
    };
    let parts = proxy_parts(&args.proxy, false)?;
    let (ca_out, bundle_out) = (args.ca_cert_out.as_deref(), args.ca_bundle_out.as_deref());
    let inspection = crate::shared::tls::inspection_for_clients(ca_out, bundle_out, &args.proxy.upstream_ca)?;
    let target = Target {
        netns,
        isolation: isolation(&args),
        canaries: args.canary.clone(),
        listen: args.listen,
        transparent: args.transparent,
    };
    let until_empty = args.until_empty;
    let proxy_args = args.proxy;
    with_stop_signals(move |mut stop| async move {
        serve(target, until_empty, (parts, &proxy_args), inspection, &mut stop).await
    })
}

fn isolation(args: &AttachArgs) -> Isolation {
    Isolation { interfaces: args.interfaces.clone(), allow_routes: args.allow_routes }
}

/// Bind inside `target`, say so, and serve until a stop signal or the namespace is gone.
async fn serve(
    target: Target,
    until_empty: bool,
    (parts, proxy_args): (ProxyParts, &crate::cli::SandboxProxyArgs),
    inspection: Arc<Inspection>,
    stop: &mut StopSignals,
) -> Result<Exit, Failure> {
    let ProxyParts { policy, pins, audit, secrets } = parts;
    let attached = attach(&target, &policy)?;
    let mut config = config((policy, pins, secrets), Arc::new(audit), Some(inspection));
    // leash's terminal is its own here (no command shares it): questions are asked there too.
    let ask = crate::shared::ask::start_for(proxy_args, &mut config, leash_sandbox::Prompter::direct(), None)?;
    println!("listening inside the network namespace {} on {}", target.netns, target.listen);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let why = tokio::select! {
            why = gone(&target.netns, attached.id) => why,
            why = emptied(&target.netns, attached.id), if until_empty => why,
        };
        let _ = gone_tx.send(why);
    });
    if let Some(why) = serve_until(attached.inside, config, gone_rx, stop, None::<fn()>).await {
        tracing::info!("{why}; stopped serving it");
    }
    drop(attached.socket_files);
    if let Some(summary) = ask.as_ref().and_then(|front| front.summary()) {
        eprint!("{summary}");
    }
    Ok(Exit::Ok)
}

fn usage(why: &str) -> Failure {
    Failure::new(Exit::Usage, format!("leash attach: {why}"))
}
