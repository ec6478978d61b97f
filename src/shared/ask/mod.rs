//! Ask mode's front ends (`mode: ask`, `--ask`): where a person answers the questions the proxy holds requests on
//! (`leash_proxy::ask`). Two of them, which may both be up and answer the same questions:
//! - the terminal leash was started from, when there is one ([`terminal`]): a prompt the command can neither write
//!   into nor answer (its output waits and its keystrokes go to leash while the prompt is up);
//! - a control socket ([`socket`], protocol in [`protocol`] and docs/ask.md), a Unix socket in a 0700 directory the
//!   sandbox cannot see, for `leash ask`, a UI or a harness.
//!
//! An `always` answer is a reviewed change of the policy file: the entry is added keeping the file's comments,
//! validated as `leash check` would, written atomically and reloaded — only then is the question answered. With no
//! policy file (`--allow`), `always` is refused and `run` is the way to say yes.

pub mod protocol;
pub mod socket;
pub mod terminal;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leash_proxy::ask::{Answer, AnsweredBy, Asking};
use leash_proxy::{Metrics, PolicyHandle};

use crate::cli::AskArgs;
use crate::exit::Failure;
use crate::policy_file::HeldPolicy;

/// Where the policy an `always` answer is written into comes from.
#[derive(Debug)]
pub struct PolicySource {
    /// The policy file, held from start, and its profile; `None` for an inline policy (`--allow`).
    pub file: Option<(HeldPolicy, Option<String>)>,
    /// Whether `--ask` turned ask mode on (the reloaded file then gets it again).
    pub ask_flag: bool,
}

impl PolicySource {
    /// The policy file at `policy` held now, before any command runs (see [`HeldPolicy`]); a file that cannot be
    /// held stops leash (it was just read).
    pub fn hold(policy: Option<&Path>, profile: Option<&str>, ask_flag: bool) -> Result<PolicySource, Failure> {
        let file = policy
            .map(|path| {
                let held = HeldPolicy::open(path).map_err(|e| {
                    Failure::usage(format!("ask mode: cannot hold the policy file `{}`: {e}", path.display()))
                })?;
                Ok((held, profile.map(str::to_owned)))
            })
            .transpose()?;
        Ok(PolicySource { file, ask_flag })
    }
}

/// Ask mode for one proxy: its questions, the policy an `always` changes, and where its control socket is.
pub struct AskFront {
    /// The questions (shared with the proxy).
    pub asking: Arc<Asking>,
    policy: PolicyHandle,
    source: PolicySource,
    /// The control socket, bound before anything of the sandbox runs.
    pub socket: socket::Bound,
}

impl AskFront {
    /// Ask mode's questions for a proxy whose policy is `policy`, timing out after `--ask-timeout`, answered over
    /// `socket` (see [`bind_socket`]) and the terminal.
    pub fn new(
        args: &AskArgs,
        socket: socket::Bound,
        policy: PolicyHandle,
        source: PolicySource,
        metrics: Arc<Metrics>,
    ) -> Self {
        let asking = Arc::new(Asking::new(Duration::from_secs(args.ask_timeout), metrics));
        AskFront { asking, policy, source, socket }
    }

    /// Say where questions are answered (stderr), before the command starts.
    pub fn announce(&self, on_terminal: bool) {
        let terminal = if on_terminal { "on this terminal and " } else { "" };
        // The terminal is raw while the command runs (its pseudo-terminal is relayed): a line ends in CR LF there.
        let end = if on_terminal { "\r\n" } else { "\n" };
        eprint!(
            "leash: ask mode: a host the policy does not allow is asked about {terminal}over {} (`leash ask`); \
             unanswered after {}s it is refused{end}",
            self.socket.path().display(),
            self.asking.timeout().as_secs()
        );
    }

    /// Answer question `id` (see [`answer_question`]).
    pub fn answer(&self, id: u64, answer: Answer, scope: Option<&str>, by: AnsweredBy) -> Result<(), String> {
        answer_question(&self.asking, (&self.policy, &self.source), (id, answer, scope), by)
    }

    /// What the person approved for the run, said on stderr once the run has ended, with the `allowed_hosts` lines
    /// that would keep them (those answered `always` are in the file already).
    pub fn summary(&self) -> Option<String> {
        let approved = self.asking.approved();
        if approved.is_empty() {
            return None;
        }
        let mut out = String::from("leash: approved in this run (ask mode):\n");
        for (scope, answer) in &approved {
            let note = if *answer == Answer::Always { "  (always: in the policy file now)" } else { "" };
            out.push_str(&format!("  {scope}{note}\n"));
        }
        let lines: Vec<&str> =
            approved.iter().filter(|(_, a)| *a != Answer::Always).map(|(scope, _)| scope.as_str()).collect();
        if !lines.is_empty() {
            out.push_str("  to allow them from now on, add to the policy's allowed_hosts:\n");
            lines.iter().for_each(|scope| out.push_str(&format!("    - {scope}\n")));
        }
        Some(out)
    }
}

/// The control socket (at `--ask-socket` or the default place), bound before anything of the sandbox exists: a
/// socket that cannot be made stops the run (no question may wait where nobody can answer it), and its directory
/// is hidden inside the sandbox.
pub fn bind_socket(args: &AskArgs) -> Result<socket::Bound, Failure> {
    let path = match &args.ask_socket {
        Some(path) => path.clone(),
        None => socket::default_path().map_err(|e| {
            Failure::sandbox_failed(format!(
                "ask mode: cannot make a directory for the control socket: {e}; pass --ask-socket"
            ))
        })?,
    };
    socket::Bound::bind(&path).map_err(|e| {
        Failure::sandbox_failed(format!("ask mode: cannot listen on the control socket `{}`: {e}", path.display()))
    })
}

/// `policy` in ask mode when `--ask` asks for it; a policy that cannot be (a blocklist, audit mode) is a usage error.
pub fn ask_mode(policy: leash_policy::Policy, args: &AskArgs) -> Result<leash_policy::Policy, Failure> {
    if !args.ask {
        return Ok(policy);
    }
    policy.into_ask().ok_or_else(|| Failure::usage("--ask needs an allowlist: a blocklist refuses nothing as not-allowed, and audit mode refuses nothing to ask about"))
}

/// Ask mode for a sandbox's proxy served from leash's runtime (`docker run`, `attach`), when its policy asks: the
/// control socket (`bound` already, or bound here) served, `config` holding the questions, and `prompter` (if any)
/// asking at the terminal. Call it on the runtime, before the proxy serves.
pub fn start_for(
    args: &crate::cli::SandboxProxyArgs,
    config: &mut leash_proxy::ProxyConfig,
    prompter: Option<leash_sandbox::Prompter>,
    bound: Option<socket::Bound>,
) -> Result<Option<Arc<AskFront>>, Failure> {
    if !config.policy.current().asks() {
        return Ok(None);
    }
    let source = PolicySource::hold(args.policy.as_deref(), args.profile.as_deref(), args.ask.ask)?;
    let socket = match bound {
        Some(socket) => socket,
        None => bind_socket(&args.ask)?,
    };
    let front = Arc::new(AskFront::new(&args.ask, socket, config.policy.clone(), source, config.metrics.clone()));
    config.ask = Some(front.asking.clone());
    let fail = |e: std::io::Error| Failure::sandbox_failed(format!("ask mode: cannot serve the control socket: {e}"));
    socket::Bound::serve(&front).map_err(fail)?;
    front.announce(prompter.is_some());
    if let Some(prompter) = prompter {
        terminal::spawn(front.clone(), prompter).map_err(fail)?;
    }
    Ok(Some(front))
}

/// Answer question `id` on `asking`: for `always`, first add the host (or `scope`) to the policy file and reload
/// it; a file that cannot be changed leaves the question open and says why.
pub fn answer_question(
    asking: &Asking,
    (policy, source): (&PolicyHandle, &PolicySource),
    (id, answer, scope): (u64, Answer, Option<&str>),
    by: AnsweredBy,
) -> Result<(), String> {
    if answer == Answer::Always {
        let question = asking.pending().into_iter().find(|q| q.id == id).ok_or(format!("no open question {id}"))?;
        let entry = scope.unwrap_or(&question.host);
        if !leash_proxy::ask::covers(entry, &question.host) {
            return Err(format!("`{entry}` does not cover `{}`", question.host));
        }
        write_always(policy, source, entry)?;
    }
    asking.answer(id, answer, scope, by).map_err(|e| e.to_string())
}

/// Add `entry` to the policy file's `allowed_hosts` (a reviewed change: validated, written atomically, comments
/// kept) and put the new policy in force.
fn write_always(policy: &PolicyHandle, source: &PolicySource, entry: &str) -> Result<(), String> {
    let Some((held, profile)) = &source.file else {
        return Err("no policy file to write `always` into (the policy is inline): answer `run`".to_owned());
    };
    // A file edited since the start in a way a reload refuses (its credentials, its services) is left alone.
    let running = policy.current();
    let accept = |new: &leash_policy::Policy| crate::policy_file::check_same_resources(&running, new);
    let loaded = crate::policy_file::allow_always(held, profile.as_deref(), entry, accept)?;
    let mut reloaded = loaded.policy;
    if source.ask_flag {
        reloaded = reloaded.into_ask().ok_or("the changed policy cannot be in ask mode")?;
    }
    policy.store(reloaded)?;
    tracing::info!("ask mode: `{entry}` added to {}'s allowed_hosts and reloaded", held.path().display());
    Ok(())
}
