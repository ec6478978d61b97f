//! The command line, as clap derives it. Each subcommand's `--help` teaches with an example.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "leash",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LEASH_COMMIT"), ")"),
    about = "An egress filter for AI agents: every request decided by a policy, every decision on record",
    long_about = "leash decides what a sandboxed agent may reach on the network. `leash proxy` runs an HTTP/HTTPS \
                  egress proxy that enforces a policy file (an allowlist of hosts, or a blocklist of hosts and URL \
                  prefixes), answers refusals with 403 and writes every decision to a JSONL audit log.",
    after_help = "Examples:\n  leash check examples/allowlist.yaml\n  leash explain --policy examples/blocklist.yaml https://arxiv.org/abs/2401.01234\n  leash proxy --policy examples/allowlist.yaml --listen 127.0.0.1:3128 --log audit.jsonl\n\nLogging: RUST_LOG=debug (default info; warn for `leash run` and `leash docker run`) controls what leash prints on stderr."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `leash run`'s command line alone: [`Command::Run`] without the other subcommands. Building clap's whole tree, every
/// subcommand's arguments and help, was a tenth of a millisecond of each `leash run -- true`; `main` takes this one
/// when the first argument is `run`. A test checks that `leash run --help` and its errors read the same either way.
#[derive(Debug, Parser)]
#[command(name = "leash")]
pub struct RunOnly {
    #[command(subcommand)]
    pub command: RunCommand,
}

/// The one subcommand of [`RunOnly`], documented as [`Command::Run`] is.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Run a command in a sandbox whose only way out is leash's proxy
    Run(RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the egress proxy
    Proxy(ProxyArgs),
    /// Validate a policy file and warn about surprising ones
    Check(CheckArgs),
    /// Show the decision the proxy would take for a request, before DNS
    Explain(ExplainArgs),
    /// Run a command in a sandbox whose only way out is leash's proxy
    Run(RunArgs),
    /// Run (or attach to) a Docker container whose only way out is leash's proxy
    Docker(DockerArgs),
    /// Serve leash's proxy inside any network namespace: a microVM's tap, a pod, another runtime's container
    Attach(AttachArgs),
    /// Read audit logs: what was allowed and refused, by host
    Log(LogArgs),
    /// Write a policy from audit logs
    Policy(PolicyArgs),
    /// Answer ask mode's questions over a running leash's control socket: list, answer, watch
    Ask(AskClientArgs),
    /// Test, from inside a sandbox or pod, that its only way out is leash: every other path must be shut
    Probe(ProbeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = "Examples:\n  mkdir -p ~/.local/share/bash-completion/completions && \
    leash completions bash > ~/.local/share/bash-completion/completions/leash\n  \
    leash completions zsh > \"${fpath[1]}/_leash\"\n  leash completions fish > ~/.config/fish/completions/leash.fish")]
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff): leash(1), or a subcommand's; or write them all to a man directory
    #[command(
        after_help = "Examples:\n  leash man | man -l -\n  leash man run | man -l -\n  leash man docker run | man -l -\n  \
    leash man --dir /usr/local/share/man/man1    # leash.1, leash-run.1, leash-docker-run.1, ...; then `man leash-run`"
    )]
    Man {
        /// The subcommand whose page to print (`run`, `docker run`); leash(1) without one
        #[arg(value_name = "COMMAND", conflicts_with = "dir")]
        command: Vec<String>,
        /// Write every page, leash.1 and leash-COMMAND.1 for each subcommand, into DIR (made if missing)
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  leash docker run --allow pypi.org --rm agent-image:latest pip download requests\n  \
    leash docker attach --policy policy.yaml --log audit.jsonl agent-container\n\n\
    `leash docker run --help` and `leash docker attach --help` say what each does and refuses."
)]
pub struct DockerArgs {
    #[command(subcommand)]
    pub command: DockerCommand,
}

#[derive(Debug, Subcommand)]
pub enum DockerCommand {
    /// Create and run a container with no network but leash's proxy, like `docker run`
    Run(DockerRunArgs),
    /// Serve leash's proxy inside a running container started with `--network none`
    Attach(DockerAttachArgs),
}

/// Ask mode's options, on every command that runs a proxy (docs/ask.md).
#[derive(Debug, Clone, Args)]
pub struct AskArgs {
    /// Ask mode (like `mode: ask`): hold a request the allowlist refuses as `not-allowed` and ask a person, on this
    /// terminal and over the control socket (`leash ask`): allow once, for the run, always (added to the policy
    /// file), or deny for the run. Every other refusal stays one
    #[arg(long, conflicts_with = "audit")]
    pub ask: bool,
    /// Ask mode: how long a question waits for an answer before its requests are refused (`ask-timeout`) and the
    /// host with them, for the rest of the run
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub ask_timeout: u64,
    /// Ask mode: the control socket to listen on (its directory must be the user's own, mode 0700); default:
    /// $XDG_RUNTIME_DIR/leash/ask-PID.sock, else /run/leash/ask-PID.sock for root, else /tmp/leash-UID/ask-PID.sock
    #[arg(long, value_name = "PATH")]
    pub ask_socket: Option<PathBuf>,
}

/// `leash ask`: a client of a running leash's control socket.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash ask\n  leash ask list --json\n  leash ask answer 3 run\n  \
    leash ask answer 4 always --scope .example.com\n  leash ask /run/user/1000/leash/ask-4242.sock watch\n\n\
    Alone, `leash ask` watches and asks about each new question on this terminal. Without SOCKET, the one control \
    socket in $XDG_RUNTIME_DIR/leash (else /run/leash for root, /tmp/leash-UID for others) is used; with several, name one. The protocol (JSON lines) \
    is in docs/ask.md.")]
pub struct AskClientArgs {
    /// The control socket (default: the only one running); also `--socket`
    #[arg(value_name = "SOCKET", conflicts_with = "socket")]
    pub socket_path: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<AskCommand>,
    /// The control socket (default: the only one running)
    #[arg(long, global = true, value_name = "SOCKET")]
    pub socket: Option<PathBuf>,
}

/// What `leash ask` does.
#[derive(Debug, Subcommand)]
pub enum AskCommand {
    /// List the questions waiting for an answer
    List {
        /// One JSON document instead of the table
        #[arg(long)]
        json: bool,
    },
    /// Answer a question: once, run, always or deny
    Answer {
        /// The question's id (`leash ask list`)
        id: u64,
        /// once, run, always or deny
        answer: String,
        /// For run, always and deny: a `.domain` over the host instead of the host alone
        #[arg(long, value_name = "HOST_OR_.DOMAIN")]
        scope: Option<String>,
    },
    /// Print every question and answer as it happens (JSON lines) until leash ends
    Watch,
}

/// The policy, audit log, pins and upstream trust of a sandbox's proxy (`leash run`, `leash docker`).
#[derive(Debug, Args)]
pub struct SandboxProxyArgs {
    /// The policy file (.yaml, .yml, .toml or .json); or give --task, or --allow / --block instead
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block", "task"])]
    pub policy: Option<PathBuf>,
    /// A harness's task file read as the policy: benchflow's task.toml (`[sandbox]`/`[agent]` network_mode,
    /// allowed_hosts, blocked_urls, blocked_hosts), task.md's front matter, a GitHub Agentic Workflow's .md
    /// (`network:`), Codex's config.toml, or a sandbox runtime's settings (.json: sandbox-runtime's `network`, Claude
    /// Code's `sandbox.network`; `leash check --task` says what each became)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block"])]
    pub task: Option<PathBuf>,
    /// The operator's boundary: a policy file whose refusals always apply and whose allows cap this run's policy
    /// (no run policy, `--audit` or ask-mode answer widens it); default: the LEASH_BOUNDARY variable
    #[arg(long, value_name = "FILE", env = "LEASH_BOUNDARY")]
    pub boundary: Option<PathBuf>,
    /// Learn a policy: let through what its host and path rules would refuse, logged as `would-block` with the
    /// reason; ports, IP literals and internal destinations are still refused (like `mode: audit`)
    #[arg(long)]
    pub audit: bool,
    #[command(flatten)]
    pub ask: AskArgs,
    /// Use this profile's `network` instead of the top-level one
    #[arg(long, value_name = "NAME", requires = "policy", conflicts_with_all = ["allow", "block"])]
    pub profile: Option<String>,
    /// Allow this host (`.example.com`: it and every subdomain) or preset (`+python`); an inline allowlist (repeatable)
    #[arg(long, value_name = "HOST")]
    pub allow: Vec<String>,
    /// Block this host or host/path prefix; an inline blocklist (repeatable)
    #[arg(long, value_name = "RULE")]
    pub block: Vec<String>,
    /// Append the JSONL audit log to FILE (mode 0600), hidden from the command; default: a file of its own under
    /// ~/.local/state/leash/runs/, written once the command has ended (under docker, lines name the container)
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Answer NAME with ADDR instead of asking DNS (repeatable)
    #[arg(long = "resolve", value_name = "NAME:ADDR")]
    pub resolve: Vec<String>,
    /// Also trust this CA (PEM file) when verifying inspected upstreams, beside the system roots (repeatable)
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash docker run --allow pypi.org --allow .pythonhosted.org \
    python:3 pip download requests\n  \
    leash docker run --policy policy.yaml --log audit.jsonl -it --name agent agent-image:latest ./agent.sh\n\n\
    leash's options come first; everything from the first other argument on is `docker run`'s. The container is \
    created with `--network none` (only `lo`, no IPv6), `--cap-drop NET_RAW --cap-drop NET_ADMIN`, and \
    HTTP_PROXY/HTTPS_PROXY/ALL_PROXY pointing at leash's proxy, which listens on 127.0.0.1:3128 inside the container \
    and is served from leash. Tunnels to hosts with path rules are TLS-inspected: the run's CA is mounted at \
    /run/leash/ca.pem (with a bundle, bundle.pem) and SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, \
    GIT_SSL_CAINFO, PIP_CERT, CARGO_HTTP_CAINFO, AWS_CA_BUNDLE, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH and the like, and \
    NODE_EXTRA_CA_CERTS point at them. Its command is held until the proxy is there \
    (the image needs /bin/sh). Options that \
    would defeat the policy (--network other than none, --privileged, --cap-add NET_ADMIN/NET_RAW/SYS_ADMIN/ALL, \
    --pid host, --userns host, the Docker socket mounted) are refused. leash exits with the container's status and \
    removes it; Ctrl-C, SIGTERM or SIGHUP stops it. Names resolve through leash's DNS stub (--dns 127.0.0.1): \
    refused ones fail at once. If Docker is absent or refuses, nothing runs and leash exits 125. \
    Needs root and a local Docker daemon.")]
pub struct DockerRunArgs {
    #[command(flatten)]
    pub proxy: SandboxProxyArgs,
    /// Run even with docker options that let the container around the policy (it is then NOT contained)
    #[arg(long)]
    pub danger_allow_unsafe_docker_options: bool,
    /// Start the command at once instead of holding it until the proxy listens (for images without /bin/sh): its
    /// first connections may be refused, never let out
    #[arg(long)]
    pub no_start_gate: bool,
    /// Print no summary of refused requests when the container ends
    #[arg(long)]
    pub quiet: bool,
    /// `docker run` options, the image and its command
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "[DOCKER RUN OPTIONS] IMAGE [CMD]"
    )]
    pub docker: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  docker run -d --network none -e HTTPS_PROXY=http://127.0.0.1:3128 \
    --name job image ./job.sh\n  \
    leash docker attach --policy policy.yaml --log audit.jsonl job\n\n\
    For harnesses that create containers themselves. The container must be running and hold no interface but `lo` \
    (start it with `--network none`); otherwise leash refuses it and says why. leash binds 127.0.0.1:3128 inside it, \
    prints `listening inside ID on 127.0.0.1:3128` and serves until the container exits (leash then exits with its \
    status) or until SIGINT/SIGTERM/SIGHUP (exit 0; the container keeps running, with no way out). Setting the proxy \
    variables in the container, and giving it the CA written with --ca-cert-out (TLS inspection), is the \
    harness's part.")]
pub struct DockerAttachArgs {
    #[command(flatten)]
    pub proxy: SandboxProxyArgs,
    /// Write the run's CA certificate (PEM) to FILE, for the container's clients to trust (TLS inspection)
    #[arg(long, value_name = "FILE")]
    pub ca_cert_out: Option<PathBuf>,
    /// Write the system roots plus the run's CA (PEM) to FILE (for SSL_CERT_FILE and the like)
    #[arg(long, value_name = "FILE")]
    pub ca_bundle_out: Option<PathBuf>,
    /// The container's name or ID
    #[arg(value_name = "CONTAINER")]
    pub container: String,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  leash attach --netns /run/netns/agent1 --policy policy.yaml --log audit.jsonl\n  \
    leash attach --netns /run/netns/vm1 --interface tap0 --listen 169.254.100.1:3128 --policy policy.yaml \
    --ca-cert-out ca.pem\n  leash attach --pid 4242 --transparent --policy policy.yaml\n  \
    leash attach --dir /etc/leash/attachments --log /var/log/leash/audit.jsonl\n\n\
    leash binds its proxy's listener inside the namespace (at --listen, 127.0.0.1:3128 by default; a tap's \
    address for a microVM guest) and serves it from its own namespace, where upstreams are reached. It refuses a \
    namespace that has another way out: an interface other than `lo` and those named with --interface, a route out \
    (a default route, or one through a gateway, in any table) or an IPv6 address other than link-local -- unless \
    --allow-routes says something else (a NetworkPolicy, a firewall) drops that traffic. It prints `listening inside \
    the network namespace NETNS on ADDR` and serves until SIGINT/SIGTERM/SIGHUP, or until the namespace is gone (its file removed, as by \
    `ip netns delete`, or the process exited); then it exits 0. Setting the proxy variables and the CA (--ca-cert-out) \
    for the namespace's programs is the caller's part. With --dir, one leash serves every attachment file in DIR \
    (see docs/attach.md). Needs root."
)]
pub struct AttachArgs {
    #[command(flatten)]
    pub proxy: SandboxProxyArgs,
    /// The network namespace's file: /run/netns/NAME (`ip netns add`), /proc/PID/ns/net, or a bind mount of one
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "dir"], required_unless_present_any = ["pid", "dir"])]
    pub netns: Option<PathBuf>,
    /// The network namespace of this process
    #[arg(long, value_name = "PID", conflicts_with = "dir")]
    pub pid: Option<u32>,
    /// Serve every attachment file (*.yaml, *.yml, *.toml, *.json) in DIR, each with its namespace, policy and labels,
    /// adding, reloading and removing them as the files appear, change and go
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Where the proxy listens inside the namespace (an IPv4 address there: its loopback, or a tap's address)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:3128")]
    pub listen: std::net::SocketAddrV4,
    /// An interface the namespace may hold besides `lo` (a microVM's tap, a pod's veth); repeatable
    #[arg(long = "interface", value_name = "NAME")]
    pub interfaces: Vec<String>,
    /// Serve the namespace even with a route out or an IPv6 address other than link-local: something else (a
    /// Kubernetes NetworkPolicy, a firewall) must then drop its other traffic. leash first runs the containment
    /// self-test from inside (`leash probe --policed-outside`) and refuses the namespace when anything answers
    #[arg(long)]
    pub allow_routes: bool,
    /// With --allow-routes: an outside TCP address that answers whenever it is reachable (a service the wall must
    /// keep the namespace from), tried by the self-test; a second policy that reopens egress is caught there
    /// (repeatable)
    #[arg(long, value_name = "ADDR:PORT", requires = "allow_routes")]
    pub canary: Vec<std::net::SocketAddr>,
    /// With --netns: also stop once processes have been in the namespace and none is left (a microVM's VMM, the
    /// container's processes ended); a named namespace otherwise outlives its processes until its file is removed
    #[arg(long, requires = "netns")]
    pub until_empty: bool,
    /// Also answer DNS on the namespace's 127.0.0.1:53 (allowed names resolve to 127.0.0.2) and listen on 127.0.0.2
    /// for programs that ignore the proxy variables, as `leash run` does
    #[arg(long)]
    pub transparent: bool,
    /// Write the run's CA certificate (PEM) to FILE, for the namespace's clients to trust (TLS inspection)
    #[arg(long, value_name = "FILE")]
    pub ca_cert_out: Option<PathBuf>,
    /// Write the system roots plus the run's CA (PEM) to FILE (for SSL_CERT_FILE and the like)
    #[arg(long, value_name = "FILE")]
    pub ca_bundle_out: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  leash run --allow pypi.org --allow .pythonhosted.org -- pip download requests\n  \
    leash run --block arxiv.org/abs/2401.01234 --log audit.jsonl -- ./agent.sh\n  \
    leash run --policy policy.yaml --profile verifier -- bash\n\n\
    The command runs in new user, PID, mount and network namespaces: its network holds only `lo`, with no route \
    and no IPv6, and leash's proxy listens inside on 127.0.0.1:3128 (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY are set). \
    The command trusts the run's TLS-inspection CA through SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, \
    GIT_SSL_CAINFO, PIP_CERT, CARGO_HTTP_CAINFO, AWS_CA_BUNDLE, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH and the like, and \
    NODE_EXTRA_CA_CERTS. Its resolver is a stub that forwards nothing: refused names \
    fail at once, allowed ones resolve to 127.0.0.2, where leash also listens for programs that ignore the proxy \
    variables and decides them the same way. \
    The command reaches no host Unix socket but those named with --allow-unix-socket, runs in a session of its own \
    with its own IPC namespace and keyring, and cannot open AF_VSOCK or other families. On a terminal it gets a \
    pseudo-terminal of its own as its controlling terminal (the caller's settings and size, output filtered of what \
    acts on the operator's machine), never the caller's; without one it has none. \
    It inherits leash's environment (API keys and tokens included) unless --clean-env is given. The audit log file \
    is hidden inside; without --log the records are kept in a file under ~/.local/state/leash/runs/ (XDG_STATE_HOME) \
    once the command and every process it left have ended, and its path is said on standard error. Last comes a summary of the refused requests, with hints, on standard error (not with \
    --quiet). leash exits with the command's status \
    (128+N for a signal); if the sandbox cannot be set up, the command does not run and leash exits 125.\n\n\
    Containment (--containment, docs/inside.md): `userns` is the sandbox above. Where user namespaces are refused (a \
    container, a hosted sandbox), `netns` runs the command as --user in a network namespace of leash's holding only \
    `lo` (root with CAP_SYS_ADMIN and CAP_NET_ADMIN), and `uid-firewall` runs it as --user in leash's own network \
    namespace, behind a firewall leash programs (nft, or iptables and ip6tables) that lets that uid reach only \
    leash's listeners (root with CAP_NET_ADMIN); in both a self-test from the command's uid must pass before the \
    command starts. `auto` (the default) takes the first that can be set up and says which; with none, leash exits 125 naming what the \
    platform must grant. `advisory` (--advisory) only points the command at the proxy, which it could ignore: every \
    audit line and the summary say so."
)]
pub struct RunArgs {
    #[command(flatten)]
    pub proxy: SandboxProxyArgs,
    /// Let the command reach this filesystem Unix socket of the host's (repeatable; it reaches no other but its own)
    #[arg(long = "allow-unix-socket", value_name = "PATH")]
    pub allow_unix_socket: Vec<PathBuf>,
    /// Pass the command only PATH, HOME, USER, LOGNAME, SHELL, TERM, COLORTERM, LANG, LC_*, TZ and TMPDIR of leash's
    /// environment (plus --keep-env), not API keys, tokens or agent sockets
    #[arg(long)]
    pub clean_env: bool,
    /// With --clean-env, also pass this variable (repeatable)
    #[arg(long, value_name = "NAME", requires = "clean_env")]
    pub keep_env: Vec<String>,
    /// Print nothing of leash's own but errors: no warning (refusals among them), no summary when the command ends,
    /// no word of where the kept log is (RUST_LOG still overrides)
    #[arg(long)]
    pub quiet: bool,
    /// How the command is kept from going around the proxy: the strongest this platform allows (auto), a sandbox of
    /// user namespaces (userns), a network namespace of leash's (netns), a per-uid firewall in leash's network
    /// namespace (uid-firewall), or nothing (advisory)
    #[arg(long, value_enum, default_value_t = Containment::Auto, value_name = "MODE")]
    pub containment: Containment,
    /// The same as --containment advisory: the command is only pointed at the proxy and could ignore it
    #[arg(long, conflicts_with = "containment")]
    pub advisory: bool,
    /// Run the command as this user: a name, a UID, or UID:GID (no supplementary groups, no capabilities,
    /// no_new_privs); needed by the netns and uid-firewall containments
    #[arg(long, value_name = "USER|UID[:GID]")]
    pub user: Option<String>,
    /// Listen on this control socket (its directory must be the user's own, mode 0700; hidden from the command), over
    /// which `leash policy switch` puts another policy in force while the command runs (docs/run.md, "Phases")
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  leash proxy --policy policy.yaml --listen 127.0.0.1:3128 --log audit.jsonl\n  \
    curl -x http://127.0.0.1:3128 https://pypi.org/simple/\n\n\
    Prints `listening on ADDR:PORT` on stdout once ready. Without --log the audit log goes to stdout after that \
    line. SIGHUP reloads the policy (an invalid file keeps the old one) and reopens the log file; SIGINT/SIGTERM stop accepting, let \
    in-flight requests finish and flush the log.\n\n\
    TLS inspection: tunnels to hosts with path rules (or every tunnel, with `inspect: all`) are terminated with a \
    certificate from a CA made for this run, whose key never leaves leash's memory. Clients must trust it: \
    `--env-file leash.env` then `. ./leash.env` (every proxy and CA variable `leash run` sets), or \
    `--ca-cert-out ca.pem` then `curl --cacert ca.pem`. Upstreams are always verified (system roots, plus --upstream-ca).")]
pub struct ProxyArgs {
    /// The policy file (.yaml, .yml, .toml or .json), reloaded on SIGHUP; or give --task, or --allow / --block instead
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block", "task"], required_unless_present_any = ["allow", "block", "task"])]
    pub policy: Option<PathBuf>,
    /// A harness's task file read as the policy (benchflow's task.toml or task.md front matter, a GitHub Agentic
    /// Workflow's .md, Codex's config.toml, or sandbox-runtime's or Claude Code's settings .json), reloaded on SIGHUP
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block"])]
    pub task: Option<PathBuf>,
    /// The operator's boundary: a policy file whose refusals always apply and whose allows cap this run's policy
    /// (no run policy, `--audit` or ask-mode answer widens it); default: the LEASH_BOUNDARY variable
    #[arg(long, value_name = "FILE", env = "LEASH_BOUNDARY")]
    pub boundary: Option<PathBuf>,
    /// Use this profile's `network` instead of the top-level one
    #[arg(long, value_name = "NAME", requires = "policy", conflicts_with_all = ["allow", "block"])]
    pub profile: Option<String>,
    /// Allow this host (`.example.com`: it and every subdomain) or preset (`+python`); an inline allowlist (repeatable)
    #[arg(long, value_name = "HOST")]
    pub allow: Vec<String>,
    /// Block this host or host/path prefix; an inline blocklist (repeatable)
    #[arg(long, value_name = "RULE")]
    pub block: Vec<String>,
    /// Learn a policy: let through what its host and path rules would refuse, logged as `would-block` with the
    /// reason; ports, IP literals and internal destinations are still refused (like `mode: audit`)
    #[arg(long)]
    pub audit: bool,
    #[command(flatten)]
    pub ask: AskArgs,
    /// Address to listen on; port 0 picks a free port
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:3128")]
    pub listen: SocketAddr,
    /// Append the JSONL audit log to FILE (created with mode 0600); default: standard output
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Answer NAME with ADDR instead of asking DNS, like curl's --resolve (repeatable)
    #[arg(long = "resolve", value_name = "NAME:ADDR")]
    pub resolve: Vec<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics, an address for the operator (never --listen's); port 0
    /// picks a free port
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Write the variables `leash run` gives its command (proxy, CA, placeholders) to FILE as `export` lines, for a
    /// shell to source (`. FILE`) before starting clients; the CA files go beside it unless --ca-*-out name them
    #[arg(long, value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Listen on this control socket (its directory must be the user's own, mode 0700), over which `leash policy
    /// switch` puts another policy in force (docs/run.md, "Phases"); a SIGHUP then reloads the policy switched to
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Threads serving connections (default: one per CPU leash may use). On a small machine leash shares with the
    /// clients it serves, fewer threads can cost less CPU per request (docs/commands.md); more serve more at once
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS inspection: where the run's CA goes, and which CAs upstreams may be signed by.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Write the run's CA certificate (PEM) to FILE, for clients to trust (e.g. NODE_EXTRA_CA_CERTS)
    #[arg(long, value_name = "FILE")]
    pub ca_cert_out: Option<PathBuf>,
    /// Write the system roots plus the run's CA (PEM) to FILE (for SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE)
    #[arg(long, value_name = "FILE")]
    pub ca_bundle_out: Option<PathBuf>,
    /// Also trust this CA (PEM file) when verifying inspected upstreams, beside the system roots (repeatable)
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  leash check policy.yaml\n\n\
    Every problem is reported as FILE:LINE:COLUMN: ENTRY: MESSAGE, for every profile. \
    Exit status: 0 valid, 1 invalid, 2 unreadable.")]
pub struct CheckArgs {
    /// The policy file (.yaml, .yml, .toml or .json)
    #[arg(value_name = "FILE", required_unless_present = "task", conflicts_with = "task")]
    pub file: Option<PathBuf>,
    /// A harness's task file (benchflow's task.toml, task.md's front matter, a GitHub Agentic Workflow's .md, Codex's
    /// config.toml, or sandbox-runtime's or Claude Code's settings .json): what each network field becomes, and the
    /// policy it makes checked
    #[arg(long, value_name = "FILE")]
    pub task: Option<PathBuf>,
    /// Also check that the policy lies within this boundary: every entry that allows what the boundary refuses
    /// is an error (a run under that boundary would refuse it)
    #[arg(long, value_name = "BOUNDARY")]
    pub within: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash explain --policy policy.yaml http://pypi.org/simple/\n  \
    leash explain --policy policy.yaml POST https://api.example.com/v1/messages\n  \
    leash explain --policy policy.yaml CONNECT arxiv.org:443\n  \
    leash explain --allow pypi.org --allow .pythonhosted.org https://files.pythonhosted.org/x.whl\n  \
    leash explain --allow +python https://files.pythonhosted.org/x.whl\n\n\
    The first line is `allow|block|inspect REASON [RULE]`. Exit status: 0 allowed, 1 refused, 2 usage or \
    policy error. The decision is the one the proxy takes before DNS; the destination check on the resolved \
    addresses still follows it.")]
pub struct ExplainArgs {
    /// The policy file (.yaml, .yml, .toml or .json); or give --task, or --allow / --block instead, as to `leash run`
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block", "task"], required_unless_present_any = ["allow", "block", "task"])]
    pub policy: Option<PathBuf>,
    /// A harness's task file read as the policy (benchflow's task.toml or task.md front matter, a GitHub Agentic
    /// Workflow's .md, Codex's config.toml, or a sandbox runtime's settings .json)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["allow", "block"])]
    pub task: Option<PathBuf>,
    /// The operator's boundary: a policy file whose refusals always apply and whose allows cap this run's policy
    /// (no run policy, `--audit` or ask-mode answer widens it); default: the LEASH_BOUNDARY variable
    #[arg(long, value_name = "FILE", env = "LEASH_BOUNDARY")]
    pub boundary: Option<PathBuf>,
    /// Use this profile's `network` instead of the top-level one
    #[arg(long, value_name = "NAME", requires = "policy", conflicts_with_all = ["allow", "block"])]
    pub profile: Option<String>,
    /// Allow this host (`.example.com`: it and every subdomain) or preset (`+python`); an inline allowlist (repeatable)
    #[arg(long, value_name = "HOST")]
    pub allow: Vec<String>,
    /// Block this host or host/path prefix; an inline blocklist (repeatable)
    #[arg(long, value_name = "RULE")]
    pub block: Vec<String>,
    /// METHOD URL, or just URL (GET); `CONNECT host:port` for a tunnel
    #[arg(value_name = "[METHOD] URL", num_args = 1..=2, required = true)]
    pub request: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  leash log summary audit.jsonl\n\n\
    `leash log summary --help` says what the summary holds.")]
pub struct LogArgs {
    #[command(subcommand)]
    pub command: LogCommand,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Decisions by host and port: allowed, refused, would-block, bytes each way and why
    Summary(LogSummaryArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash log summary audit.jsonl\n  \
    leash log summary --json audit.jsonl audit.jsonl.1 | jq '.hosts[] | select(.refused > 0)'\n  \
    leash run --allow pypi.org -- pip download requests 2>&1 | leash log summary -\n\n\
    One row per host and port (DNS lookups by `leash run`'s stub as port `dns`), hosts with refusals first; \
    REASONS says why requests were refused (then, after `would-block:`, why others would have been). Lines that \
    are not audit records (warnings around a log replayed on stderr) are skipped and counted on stderr. \
    Exit status: 0; 2 when a log cannot be read.")]
pub struct LogSummaryArgs {
    /// One JSON document for a program instead of the table (its shape: docs/audit-log.md)
    #[arg(long)]
    pub json: bool,
    /// Audit log files (JSON lines); `-` reads standard input
    #[arg(value_name = "LOG", required = true)]
    pub logs: Vec<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  leash policy suggest audit.jsonl --output policy.yaml\n  leash policy presets python\n\n\
    `leash policy suggest --help` says what the suggestion holds, `leash policy presets --help` how presets are \
    written."
)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Suggest a minimal policy that allows what audit logs show was used
    Suggest(PolicySuggestArgs),
    /// List the host presets (`+python`, `+github`, ...) `allowed_hosts` takes, or show one with what each host is for
    Presets(PolicyPresetsArgs),
    /// Put another policy in force in a running `leash run` or `leash proxy` started with --control
    Switch(PolicySwitchArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash policy presets\n  leash policy presets python\n  \
    leash run --allow +python -- pip install requests\n\n\
    A preset is written `+NAME` (the newest version this leash knows) or `+NAME@VERSION` (pinned) beside hosts in \
    `allowed_hosts` or after --allow:\n\n  network:\n    mode: allowlist\n    allowed_hosts: [+python@1, +github, \
    api.example.com]\n\n\
    Each adds its hosts as exact entries (never a subdomain wildcard); a version's hosts never change, a change is \
    a new version. `leash check` says what each preset in a policy added; `leash explain` names the preset when one \
    of its hosts decides. Exit status: 0; 2 for an unknown preset.")]
pub struct PolicyPresetsArgs {
    /// A preset to show (`python`, `+python`, `python@1`): its hosts and what clients fetch from each; every version
    /// of every preset without one
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "Example, set up online and then lock down:\n  \
    leash run --policy setup.yaml --control /run/user/1000/leash/ctl.sock -- ./agent.sh &\n  \
    leash policy switch --control /run/user/1000/leash/ctl.sock locked.yaml\n\n\
    leash reads FILE and validates it as `leash check` does; a file with any problem, or one that needs what the run \
    was not built with (other credentials, services or transparent ports, TLS inspection in a run started without \
    it, ask mode), is refused and the policy in force stays. Otherwise the new policy is put in force at once, for \
    every request decided from then on, and every open tunnel and request in flight it refuses is cut (a tunnel it \
    would now inspect too: nothing in it was read); the audit log gets a `policy-switch` line. Exit status: 0 \
    switched; 1 refused (why on stderr) or the socket cannot be reached; 2 usage. The protocol (one JSON line each \
    way) is in docs/run.md, \"Phases\".")]
pub struct PolicySwitchArgs {
    /// The control socket of the run (its --control)
    #[arg(long, value_name = "SOCKET")]
    pub control: PathBuf,
    /// Use this profile's `network` instead of the file's top-level one
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The policy to put in force (.yaml, .yml, .toml or .json)
    #[arg(value_name = "FILE")]
    pub policy: PathBuf,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  leash run --policy loose.yaml --log audit.jsonl -- ./agent.sh\n  \
    leash policy suggest audit.jsonl --output policy.yaml && leash check policy.yaml\n  \
    leash policy suggest --mode blocklist audit.jsonl\n\n\
    allowlist: every host a request was allowed to (or let through as would-block), as exact entries; two or more \
    subdomains of one registrable domain (by the public-suffix list: a.foo.co.uk and b.foo.co.uk, never \
    x.github.io and y.github.io) fold into `.foo.co.uk`, unless a name under it was only ever refused. blocklist: \
    the hosts only ever refused, none that would cut off a used host. Both add the ports used beyond 80/443 \
    (`ports`) and 443 (`tunnel_ports`), and comment each entry with how often it was used. IP literals and names \
    refused as internal destinations never become allow entries; names only looked up are not needed. Review the \
    result before using it. Exit status: 0; 2 when a log cannot be read or FILE written.")]
pub struct PolicySuggestArgs {
    /// allowlist: list what was used; blocklist: list what was only ever refused
    #[arg(long, value_enum, default_value_t = SuggestMode::Allowlist)]
    pub mode: SuggestMode,
    /// Write the policy to FILE (.yaml or .yml) instead of standard output
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Audit log files (JSON lines); `-` reads standard input
    #[arg(value_name = "LOG", required = true)]
    pub logs: Vec<PathBuf>,
}

/// The kind of policy `leash policy suggest` writes.
/// How `leash run` keeps the command from going around the proxy (docs/inside.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Containment {
    /// The strongest this platform allows, in the order below
    Auto,
    /// New user, pid, mount and network namespaces of the sandbox's own
    Userns,
    /// The command as another uid in a network namespace of leash's holding only `lo` (root with CAP_SYS_ADMIN)
    Netns,
    /// The command as another uid in leash's network namespace, behind a firewall that admits only leash
    UidFirewall,
    /// Nothing: the command is pointed at the proxy and could ignore it
    Advisory,
}

impl Containment {
    /// The word the audit log and the messages use.
    pub fn word(self) -> &'static str {
        match self {
            Containment::Auto => "auto",
            Containment::Userns => "userns",
            Containment::Netns => "netns",
            Containment::UidFirewall => "uid-firewall",
            Containment::Advisory => "advisory",
        }
    }
}

/// `leash probe`: the containment self-test, from inside a sandbox.
#[derive(Debug, Args)]
#[command(after_help = "Example, inside a pod or sandbox whose only way out should be a proxy on 127.0.0.1:3128:\n  \
    leash probe --expect 127.0.0.1:3128\n\n\
    Tries, from this process's uid and namespaces, every way out that must be shut: TCP and UDP to an outside \
    address over IPv4 and IPv6 (the documentation addresses 192.0.2.1 and 2001:db8::1, which no host answers), an \
    ICMP echo, every TCP port listening on the loopback that is not expected, the resolvers of /etc/resolv.conf, \
    Docker's 127.0.0.11 and systemd's 127.0.0.53; and connects to each --expect listener, which must answer. One \
    line per probe; exit 0 when everything is shut and every expected listener answers, 1 when anything got \
    through (the OPEN lines say what). With --policed-outside (a pod whose NetworkPolicy is the wall), only \
    answers count: give --canary addresses that would answer if reachable.")]
pub struct ProbeArgs {
    /// A TCP listener of leash's that must answer (the proxy's, a service's; repeatable)
    #[arg(long, value_name = "ADDR:PORT")]
    pub expect: Vec<std::net::SocketAddr>,
    /// A UDP socket of leash's (the DNS stub), which the resolver probes leave alone (repeatable)
    #[arg(long, value_name = "ADDR:PORT")]
    pub expect_udp: Vec<std::net::SocketAddr>,
    /// An outside TCP address that answers whenever it is reachable (a service beyond the sandbox's wall): it must
    /// not be reached (repeatable)
    #[arg(long, value_name = "ADDR:PORT")]
    pub canary: Vec<std::net::SocketAddr>,
    /// This namespace has routes out and something outside it (a NetworkPolicy, the host's firewall) drops what
    /// leaves: a way out then counts as open only when something answers (a TCP accept or reset, a DNS answer), and
    /// a --canary is what makes the test bite
    #[arg(long)]
    pub policed_outside: bool,
    /// Print only the failed probes
    #[arg(long)]
    pub quiet: bool,
    /// For leash's own self-test: wait for a line on stdin before each attempt (leash reads its firewall's counters)
    #[arg(long, hide = true)]
    pub stepwise: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuggestMode {
    Allowlist,
    Blocklist,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// What clap makes of `args`: the parsed `run` arguments, or the message it prints (help, usage, errors).
    fn outcome<P: Parser + std::fmt::Debug>(args: &[&str], run_args: impl Fn(P) -> RunArgs) -> String {
        match P::try_parse_from(args) {
            Ok(parsed) => format!("{:?}", run_args(parsed)),
            Err(e) => format!("{:?}: {}", e.kind(), e.render()),
        }
    }

    #[test]
    fn leash_run_parses_and_reads_the_same_through_its_own_command_line() {
        let full = |cli: Cli| match cli.command {
            Command::Run(args) => args,
            other => panic!("parsed as {other:?}"),
        };
        let alone = |cli: RunOnly| match cli.command {
            RunCommand::Run(args) => args,
        };
        for args in [
            &["leash", "run", "--help"][..],
            &["leash", "run", "-h"],
            &["leash", "run"],
            &["leash", "run", "--version"],
            &["leash", "run", "--bogus", "--", "true"],
            &["leash", "run", "--alow", "pypi.org", "--", "true"],
            &["leash", "run", "--policy", "p.yaml", "--allow", "pypi.org", "--", "true"],
            &["leash", "run", "--allow", "pypi.org", "--log", "a.jsonl", "--", "sh", "-c", "echo hi"],
            &["leash", "run", "--policy", "p.yaml", "--upstream-ca", "ca.pem", "--clean-env", "--", "true"],
        ] {
            let (a, b) = (outcome(args, full), outcome(args, alone));
            assert_eq!(a, b, "{args:?}");
        }
        // The comparison means something: help is printed and errors are told apart.
        assert!(outcome(&["leash", "run", "--help"], alone).contains("Example"));
        assert!(outcome(&["leash", "run", "--bogus", "--", "true"], alone).contains("--bogus"));
    }
}
