//! Reading a policy file for any subcommand: the format from the extension, the text from disk, the errors put
//! the same way everywhere (`FILE:LINE:COLUMN: ENTRY: MESSAGE`). And writing one: ask mode's "always" answer adds a
//! host to the file ([`allow_always`]), validated as `leash check` validates and replaced atomically, through a
//! descriptor of its directory held from start ([`HeldPolicy`]).

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use leash_policy::{allow_host, load, Boundary, Format, Loaded, PolicyError};

use crate::exit::{Exit, Failure};

/// Load `path` (and `profile`); a failure carries every problem, one per line.
pub fn load_file(path: &Path, profile: Option<&str>) -> Result<Loaded, Failure> {
    let text = read(path)?;
    let format = format_of(path)?;
    let loaded = load(&text, format, profile).map_err(|errors| invalid(path, &errors))?;
    // `upstream_proxy_ca` names a file the policy crate does not read: read it now, so a bad one is a load error.
    leash_proxy::tls::check_upstream_proxy(&loaded.policy)
        .map_err(|e| Failure::new(Exit::Refused, format!("{}: network.upstream_proxy_ca: {e}", path.display())))?;
    Ok(loaded)
}

/// A harness's task file (`--task`: benchflow's `task.toml`, or `task.md`'s front matter) read as a policy, with a
/// line per network field saying what it became. A task leash cannot read as the harness does fails (naming the
/// field) with exit 1, as an invalid policy file does to `leash check` (the commands that run map it to 2); an
/// unreadable file, or one of another kind, exit 2.
pub fn load_task(path: &Path) -> Result<(Loaded, Vec<String>), Failure> {
    let text = read(path)?;
    let format = leash_policy::TaskFormat::from_path(path).ok_or_else(|| {
        Failure::usage(format!(
            "cannot tell the kind of task `{}`: task files end in .toml, .md or .json",
            path.display()
        ))
    })?;
    let task = leash_policy::task_policy(&text, format).map_err(|e| Failure::new(Exit::Refused, located(path, &e)))?;
    let loaded = load(&task.text, Format::Yaml, None).map_err(|errors| {
        let lines: Vec<String> =
            errors.iter().map(|e| format!("{}: read as a task: {}: {}", path.display(), e.entry, e.message)).collect();
        Failure::new(Exit::Refused, lines.join("\n"))
    })?;
    Ok((loaded, task.became))
}

/// The policy of `--allow`/`--block`, or its errors (as `the command line:ENTRY: MESSAGE`) and exit 2.
/// The boundary at `path` (`--boundary`, LEASH_BOUNDARY): a policy file holding rules only (see
/// [`leash_policy::boundary`]). Unreadable or invalid: exit 2, like an invalid policy.
pub fn load_boundary(path: &Path) -> Result<Arc<Boundary>, Failure> {
    let loaded = load_file(path, None).map_err(|f| f.with_exit(Exit::Usage))?;
    let label = path.display().to_string();
    Boundary::new(loaded.policy, &label).map(Arc::new).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(|p| format!("leash: {label}: as a boundary: {p}")).collect();
        Failure::new(Exit::Usage, lines.join("\n"))
    })
}

/// `policy` held inside the boundary at `boundary`, if one is given; exit 2 when it cannot be (a service the
/// boundary does not declare).
pub fn bounded(policy: leash_policy::Policy, boundary: Option<&Path>) -> Result<leash_policy::Policy, Failure> {
    let Some(path) = boundary else { return Ok(policy) };
    let boundary = load_boundary(path)?;
    policy.within(boundary).map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(|p| format!("leash: {p}")).collect();
        Failure::new(Exit::Usage, lines.join("\n"))
    })
}

pub fn inline(allow: &[String], block: &[String]) -> Result<leash_policy::Policy, Failure> {
    leash_policy::Policy::from_inline(allow, block)
        .map_err(|errors| invalid(Path::new("the command line"), &errors).with_exit(Exit::Usage))
}

/// The file's text, or exit 2.
pub fn read(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("cannot read policy `{}`: {e}", path.display())))
}

pub fn format_of(path: &Path) -> Result<Format, Failure> {
    Format::from_path(path).ok_or_else(|| {
        Failure::usage(format!(
            "cannot tell the format of `{}`: policy files end in .yaml, .yml, .toml or .json",
            path.display()
        ))
    })
}

/// `errors` in `path`, each with its place, then a count (and a hint where the keys are another tool's), exit 1.
pub fn invalid(path: &Path, errors: &[PolicyError]) -> Failure {
    let mut lines: Vec<String> = errors.iter().map(|e| located(path, e)).collect();
    let n = errors.len();
    lines.push(format!("leash: `{}` is invalid ({n} error{})", path.display(), if n == 1 { "" } else { "s" }));
    if errors.iter().any(names_anothers_key) {
        lines.push(format!(
            "leash: its keys are a harness task's or another tool's (benchflow's task.toml or task.md, a GitHub \
             Agentic Workflow, Codex's config.toml, sandbox-runtime's or Claude Code's settings): read it as it is \
             with --task {}",
            path.display()
        ));
    }
    Failure::new(Exit::Refused, lines.join("\n"))
}

/// An unknown key that a file `--task` reads has: benchflow's tables, a sandbox runtime's settings, a GitHub Agentic
/// Workflow's trigger, Codex's sandbox settings.
fn names_anothers_key(e: &PolicyError) -> bool {
    const THEIRS: [&str; 12] = [
        "sandbox",
        "agent",
        "permissions",
        "filesystem",
        "network.allowedDomains",
        "network.deniedDomains",
        "task",
        "sandbox_mode",
        "sandbox_workspace_write",
        "default_permissions",
        "features",
        "on",
    ];
    e.kind == leash_policy::PolicyErrorKind::UnknownKey && THEIRS.contains(&e.entry.as_str())
}

/// `FILE:LINE:COLUMN: ENTRY: MESSAGE`, the shape editors and CI annotate.
pub fn located(path: &Path, e: &PolicyError) -> String {
    let place = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("{}:{l}:{c}", path.display()),
        (Some(l), None) => format!("{}:{l}", path.display()),
        _ => path.display().to_string(),
    };
    format!("{place}: {}: {}", e.entry, e.message)
}

/// A policy file reached through a descriptor of its directory, opened once, before any command runs: renaming that
/// directory or any above it later (a sandboxed command owning them could) changes neither what an `always` answer
/// reads nor where it writes. A symlink at the path given is resolved then, once; its target is what is held.
#[derive(Debug)]
pub struct HeldPolicy {
    /// The target's directory, `O_PATH`.
    dir: OwnedFd,
    /// The target's name in it.
    name: OsString,
    /// The path as given, for messages and the format.
    shown: PathBuf,
}

impl HeldPolicy {
    /// Resolves `path` now and holds its directory.
    pub fn open(path: &Path) -> io::Result<HeldPolicy> {
        let target = fs::canonicalize(path)?;
        let name = target.file_name().ok_or_else(|| io::Error::other("names no file"))?.to_os_string();
        let parent = target.parent().unwrap_or(Path::new("/"));
        let dir = rustix::fs::open(parent, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(HeldPolicy { dir, name, shown: path.to_path_buf() })
    }

    /// The path as it was given.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The file's text and permissions, read through the held directory (a symlink put there since is not followed).
    fn read(&self) -> io::Result<(String, fs::Permissions)> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut file = fs::File::from(rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty())?);
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok((text, file.metadata()?.permissions()))
    }

    /// Replaces the file with `text` atomically (a reader sees the old file or the new one, never a part): a new
    /// file beside it in the held directory, with `permissions`, synced, and renamed over it.
    fn replace(&self, text: &str, permissions: fs::Permissions) -> io::Result<()> {
        let (temporary, mut file) = self.create_beside()?;
        let written = (|| {
            file.write_all(text.as_bytes())?;
            file.set_permissions(permissions)?;
            file.sync_all()?;
            rustix::fs::renameat(&self.dir, &temporary, &self.dir, &self.name).map_err(io::Error::from)
        })();
        if written.is_err() {
            // Best effort: the original is untouched either way, and the stray file has a name that says what it is.
            let _ = rustix::fs::unlinkat(&self.dir, &temporary, rustix::fs::AtFlags::empty());
            return written;
        }
        // The rename is durable once the directory's entry is: sync it too (a failure here changes nothing now).
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if let Ok(dir) = rustix::fs::openat(&self.dir, ".", dir_flags, Mode::empty()) {
            let _ = rustix::fs::fsync(&dir);
        }
        Ok(())
    }

    /// A new file `.NAME.leash-PID-N` in the held directory (the same filesystem, so the rename is atomic).
    fn create_beside(&self) -> io::Result<(OsString, fs::File)> {
        let name = self.name.to_string_lossy();
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut attempt = 0;
        loop {
            let candidate = OsString::from(format!(".{name}.leash-{}-{attempt}", std::process::id()));
            match rustix::fs::openat(&self.dir, &candidate, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((candidate, fs::File::from(fd))),
                Err(rustix::io::Errno::EXIST) if attempt < 100 => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Add `entry` (`api.example.com` or `.example.com`) to the `allowed_hosts` of the network section `profile` uses
/// in the held policy file, and return the policy the new file loads to, for the caller to reload.
///
/// Only the list changes: comments, blank lines and key order are kept (`leash_policy::allow_host`). The new text
/// is validated as `leash check` validates it; then it is written to a new file beside the original (a symlink's
/// target, the symlink kept) with the original's permissions, synced, and renamed over it, all through the held
/// directory. An entry already listed writes nothing. `accept` sees the new policy before anything is written and
/// may refuse it (a running proxy that could not take it). On any error, refusal, invalid result or I/O failure, the
/// file is left as it was and the message says what went wrong.
pub fn allow_always(
    held: &HeldPolicy,
    profile: Option<&str>,
    entry: &str,
    accept: impl FnOnce(&leash_policy::Policy) -> Result<(), String>,
) -> Result<Loaded, String> {
    let path = held.path();
    let shown = path.display();
    let format = Format::from_path(path).ok_or_else(|| {
        format!("cannot tell the format of `{shown}`: policy files end in .yaml, .yml, .toml or .json")
    })?;
    let (text, permissions) = held.read().map_err(|e| format!("cannot read policy `{shown}`: {e}"))?;
    let new =
        allow_host(&text, format, profile, entry).map_err(|e| format!("cannot add `{entry}` to `{shown}`: {e}"))?;
    let loaded = validate(path, &new, format, profile)
        .map_err(|why| format!("adding `{entry}` would make `{shown}` invalid, so it is left as it was: {why}"))?;
    accept(&loaded.policy).map_err(|why| format!("`{shown}` is left as it was: {why}"))?;
    if new != text {
        held.replace(&new, permissions).map_err(|e| format!("cannot write policy `{shown}` (left as it was): {e}"))?;
    }
    Ok(loaded)
}

/// What `leash check` checks: the whole file loads, and an `upstream_proxy_ca` file it names is a readable CA.
fn validate(path: &Path, text: &str, format: Format, profile: Option<&str>) -> Result<Loaded, String> {
    let loaded = load(text, format, profile)
        .map_err(|errors| errors.iter().map(|e| located(path, e)).collect::<Vec<_>>().join("; "))?;
    leash_proxy::tls::check_upstream_proxy(&loaded.policy)
        .map_err(|e| format!("{}: network.upstream_proxy_ca: {e}", path.display()))?;
    Ok(loaded)
}

/// `new`, if it can replace `running` in a proxy that is serving: its credentials are those the running policy has
/// (their secrets were read once, at start) and its services listen where the running policy's do (bound once, at
/// start; a service's target and paths may change). A SIGHUP reload and an `always` answer both check this.
pub fn check_same_resources(running: &leash_policy::Policy, new: &leash_policy::Policy) -> Result<(), String> {
    let services = |p: &leash_policy::Policy| -> Vec<_> {
        p.services().iter().map(|s| (s.name.clone(), s.listen.clone())).collect()
    };
    if running.credentials() != new.credentials() {
        return Err("its credentials differ from those read at start; restart leash to change credentials".into());
    }
    if services(running) != services(new) {
        return Err("its services listen elsewhere than those bound at start; restart leash to change them".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use leash_policy::{parse_host, Question, TlsInspection, Verdict};

    use super::*;

    fn allows(loaded: &Loaded, host: &str) -> bool {
        let host = parse_host(host).unwrap();
        let d = loaded.policy.decide(&Question::Connect { target: &host, port: 443 }, TlsInspection::Available);
        d.verdict == Verdict::Allow
    }

    fn held(path: &Path) -> HeldPolicy {
        HeldPolicy::open(path).unwrap()
    }

    fn write(path: &Path, text: &str, mode: u32) {
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    const ASK: &str = "# the agent's policy\nnetwork:\n  mode: ask  # hold what is not listed\n  allowed_hosts:\n    \
                       - pypi.org   # the index\n\n  ports: [443]\n";

    #[test]
    fn an_always_answer_adds_the_host_keeping_comments_and_mode_bits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        write(&path, ASK, 0o640);
        let loaded = allow_always(&held(&path), None, "api.example.com", |_| Ok(())).unwrap();
        assert!(allows(&loaded, "api.example.com") && allows(&loaded, "pypi.org"));
        assert!(!allows(&loaded, "other.example.com"));
        let want = ASK.replace("# the index\n", "# the index\n    - api.example.com\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), want);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o640);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["policy.yaml"], "no temporary file is left behind");
        // Already listed: the file is not rewritten.
        let before = fs::metadata(&path).unwrap().modified().unwrap();
        assert!(allows(&allow_always(&held(&path), None, "api.example.com", |_| Ok(())).unwrap(), "api.example.com"));
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), before);
    }

    #[test]
    fn a_symlinked_policy_is_written_through_and_stays_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.toml");
        let link = dir.path().join("policy.toml");
        write(&real, "[network]\nmode = \"ask\" # hold\n", 0o600);
        std::os::unix::fs::symlink("real.toml", &link).unwrap();
        let loaded = allow_always(&held(&link), None, ".example.com", |_| Ok(())).unwrap();
        assert!(allows(&loaded, "a.example.com"));
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let want = "[network]\nmode = \"ask\" # hold\nallowed_hosts = [\".example.com\"]\n";
        assert_eq!(fs::read_to_string(&real).unwrap(), want);
        assert_eq!(fs::metadata(&real).unwrap().permissions().mode() & 0o7777, 0o600);
    }

    #[test]
    fn an_edit_that_would_make_the_policy_invalid_leaves_the_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        // Allowing a service's target host would let the agent around the service: `leash check` refuses it.
        let text = "network:\n  mode: ask\n  allowed_hosts: [pypi.org]  # keep\n  services:\n    \
                    - {name: gw, listen: 4000, target: 'gw.corp.test:4000'}\n";
        write(&path, text, 0o644);
        let why = allow_always(&held(&path), None, "gw.corp.test", |_| Ok(())).err().unwrap();
        assert!(why.contains("invalid") && why.contains("services[0].target"), "{why}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        let why = allow_always(&held(&path), Some("nope"), "a.org", |_| Ok(())).err().unwrap();
        assert!(why.contains("nope"), "{why}");
        let why = allow_always(&held(&path), None, "https://a.org/", |_| Ok(())).err().unwrap();
        assert!(why.contains("not an allowed_hosts entry"), "{why}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        let missing = HeldPolicy::open(&dir.path().join("gone.yaml")).err().unwrap();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        // The held file removed since: the answer says so and writes nothing.
        let gone = dir.path().join("soon-gone.yaml");
        write(&gone, text, 0o644);
        let held_gone = held(&gone);
        fs::remove_file(&gone).unwrap();
        let why = allow_always(&held_gone, None, "a.org", |_| Ok(())).err().unwrap();
        assert!(why.contains("cannot read policy"), "{why}");
        assert!(!gone.exists());
    }

    #[test]
    fn a_change_the_running_proxy_could_not_take_leaves_the_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        let text = "network:\n  mode: ask\n  allowed_hosts: [pypi.org]\n";
        write(&path, text, 0o644);
        // The file as it is now has a credential the running policy (loaded at start, without it) has no secret for.
        let running = leash_policy::load(text, Format::Yaml, None).unwrap().policy;
        let edited = format!("{text}  credentials:\n    - preset: github\n");
        write(&path, &edited, 0o644);
        let accept = |new: &leash_policy::Policy| check_same_resources(&running, new);
        let why = allow_always(&held(&path), None, "a.org", accept).err().unwrap();
        assert!(why.contains("credentials differ"), "{why}");
        assert_eq!(fs::read_to_string(&path).unwrap(), edited);
    }

    #[test]
    fn an_always_answer_reads_and_writes_the_file_held_at_start_whatever_was_renamed_since() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("task");
        fs::create_dir(&dir).unwrap();
        let path = dir.join("policy.yaml");
        write(&path, ASK, 0o640);
        let held = held(&path);
        // What a command owning the directory would do: move it away and plant a policy allowing everything.
        let moved = root.path().join("task.moved");
        fs::rename(&dir, &moved).unwrap();
        fs::create_dir(&dir).unwrap();
        let planted = "network:\n  mode: ask\n  allowed_hosts: [.com, .net, .org]\n";
        write(&path, planted, 0o644);
        let loaded = allow_always(&held, None, "api.example.com", |_| Ok(())).unwrap();
        assert!(allows(&loaded, "api.example.com") && allows(&loaded, "pypi.org"));
        assert!(!allows(&loaded, "evil.com"), "the planted policy was read");
        assert_eq!(fs::read_to_string(&path).unwrap(), planted, "the planted file was written");
        let want = ASK.replace("# the index\n", "# the index\n    - api.example.com\n");
        assert_eq!(fs::read_to_string(moved.join("policy.yaml")).unwrap(), want, "leash's own file was updated");
        // A symlink planted at the held name is not followed.
        fs::remove_file(moved.join("policy.yaml")).unwrap();
        std::os::unix::fs::symlink(&path, moved.join("policy.yaml")).unwrap();
        let why = allow_always(&held, None, "b.example.com", |_| Ok(())).err().unwrap();
        assert!(why.contains("cannot read policy"), "{why}");
        assert_eq!(fs::read_to_string(&path).unwrap(), planted);
    }
}
