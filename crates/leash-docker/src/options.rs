//! The `docker run` options given to `leash docker run`: split into options, image and command the way Docker's
//! own parser does (long and short forms, `=` or a separate value, bundled short flags), and checked for the
//! options that would defeat the policy (another network, privileges, network capabilities, the host's process or
//! user namespace, the Docker socket, the host's kernel interfaces and the options that unmask them). Pure: no
//! Docker, no filesystem; the host-side look at bind-mount sources (symlinks, sockets, kernel mounts, leash's own
//! files) is [`crate::host`]'s.

use std::path::{Component, Path};

/// Options that take no value (`--rm`, `-t`); `--opt=false` is accepted for them as Docker does.
const FLAGS: &[&str] = &[
    "detach",
    "disable-content-trust",
    "help",
    "init",
    "interactive",
    "no-healthcheck",
    "oom-kill-disable",
    "privileged",
    "publish-all",
    "quiet",
    "read-only",
    "rm",
    "sig-proxy",
    "tty",
    "use-api-socket",
];

/// Options that take a value (docker run's list, Docker 20.10 to 28).
#[rustfmt::skip]
const VALUED: &[&str] = &[
    "add-host", "annotation", "attach", "blkio-weight", "blkio-weight-device", "cap-add", "cap-drop",
    "cgroup-parent", "cgroupns", "cidfile", "cpu-count", "cpu-percent", "cpu-period", "cpu-quota",
    "cpu-rt-period", "cpu-rt-runtime", "cpu-shares", "cpus", "cpuset-cpus", "cpuset-mems", "detach-keys", "device",
    "device-cgroup-rule", "device-read-bps", "device-read-iops", "device-write-bps", "device-write-iops", "dns",
    "dns-opt", "dns-option", "dns-search", "domainname", "entrypoint", "env", "env-file", "expose", "gpus",
    "group-add", "health-cmd", "health-interval", "health-retries", "health-start-interval", "health-start-period",
    "health-timeout", "hostname", "io-maxbandwidth", "io-maxiops", "ip", "ip6", "ipc", "isolation", "kernel-memory",
    "label", "label-file", "link", "link-local-ip", "log-driver", "log-opt", "mac-address", "memory",
    "memory-reservation", "memory-swap", "memory-swappiness", "mount", "name", "net", "net-alias", "network",
    "network-alias", "oom-score-adj", "pid", "pids-limit", "platform", "publish", "pull", "restart", "runtime",
    "security-opt", "shm-size", "stop-signal", "stop-timeout", "storage-opt", "sysctl", "tmpfs", "ulimit", "user",
    "userns", "uts", "volume", "volume-driver", "volumes-from", "workdir",
];

/// Short forms: (letter, long name).
const SHORT: &[(char, &str)] = &[
    ('a', "attach"),
    ('c', "cpu-shares"),
    ('d', "detach"),
    ('e', "env"),
    ('h', "hostname"),
    ('i', "interactive"),
    ('l', "label"),
    ('m', "memory"),
    ('P', "publish-all"),
    ('p', "publish"),
    ('q', "quiet"),
    ('t', "tty"),
    ('u', "user"),
    ('v', "volume"),
    ('w', "workdir"),
];

/// leash's own options, named when one is found among docker's (it came too late).
const LEASH_OPTIONS: &[&str] = &[
    "allow",
    "block",
    "policy",
    "profile",
    "log",
    "resolve",
    "upstream-ca",
    "danger-allow-unsafe-docker-options",
    "no-start-gate",
];

/// Capabilities that reach past the container's empty network namespace or out of the container altogether.
const REFUSED_CAPS: &[(&str, &str)] = &[
    ("ALL", "every capability, NET_ADMIN and NET_RAW among them"),
    ("NET_ADMIN", "it can reconfigure the container's network"),
    ("NET_RAW", "raw sockets go beneath the proxy"),
    ("SYS_ADMIN", "it can mount, and enter namespaces it can open"),
    ("SYS_MODULE", "it can load kernel modules"),
    ("DAC_READ_SEARCH", "open_by_handle_at reaches host files, sockets among them"),
    ("BPF", "BPF programs can act on the host's networking"),
    ("SYS_PTRACE", "it can read and take over any process it sees, a host one through any view of the host's /proc"),
    ("SYS_RAWIO", "raw I/O ports and memory reach the host's hardware under the kernel"),
];

/// Where the host's kernel interfaces live: procfs (`/proc/sys/kernel/core_pattern`, every process's root), sysfs
/// (cgroups and their release agents, firmware) and the devices. A bind of one, of anything under one or of a
/// directory above one (`/`) brings the host kernel's writable knobs into the container.
const KERNEL_PATHS: &[&str] = &["/proc", "/sys", "/dev"];

/// Host paths whose bind mount puts a container-runtime API (which can start an unfiltered container) inside.
const RUNTIME_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
];

/// The docker run options, split and checked.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Options for `docker create`, normalised to `--name=value` / `--name`, minus the ones leash sets itself
    /// (`--rm`, `--entrypoint`, `--network none`, `--dns`).
    pub passthrough: Vec<String>,
    /// `--entrypoint` as given (`Some("")` resets the image's).
    pub entrypoint: Option<String>,
    /// The image, as given.
    pub image: String,
    /// The command and its arguments after the image; empty for the image's own.
    pub command: Vec<String>,
    /// `-i`: keep stdin attached.
    pub interactive: bool,
    /// Host paths bind-mounted (`-v /src:…`, `--mount type=bind,source=…`) and the option that names each, for
    /// the host-side check; those already refused here are left out.
    pub bind_sources: Vec<(String, String)>,
    /// Named volumes mounted (`-v NAME:…`, `--mount type=volume,source=NAME`) and the option that names each: one
    /// that already exists may have been created to bind a host path, so the daemon is asked (see [`crate::host`]).
    pub named_volumes: Vec<(String, String)>,
    /// Options that would defeat the policy; refused unless the user overrides.
    pub unsafe_options: Vec<Unsafe>,
}

/// An option that would defeat the policy, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe {
    /// The option as normalised (`--network=host`).
    pub option: String,
    /// What it would open: the sentence leash prints when refusing it.
    pub why: String,
}

/// The options cannot be used at all (no override).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// An option `docker run` does not have (or one of leash's own after the image).
    #[error("{}", unknown(.0))]
    Unknown(String),
    /// An option that takes a value came last.
    #[error("docker run option `{0}` needs a value")]
    MissingValue(String),
    /// Options, and no image after them.
    #[error("no image given: `leash docker run [OPTIONS] IMAGE [CMD...]`")]
    NoImage,
    /// An option leash cannot honour with the container behind its proxy (no override).
    #[error("`{option}` cannot be used: {why}")]
    Unsupported {
        /// The option as written.
        option: String,
        /// Why not.
        why: &'static str,
    },
}

/// Why an unknown option is refused: one of leash's own came too late, or docker's list does not have it.
fn unknown(o: &str) -> String {
    if LEASH_OPTIONS.contains(&o.trim_start_matches('-')) {
        format!("`{o}` is leash's option: leash's options come before docker's")
    } else {
        format!("unknown docker run option `{o}` (leash must know every option to find the image)")
    }
}

/// Splits `args` (everything after leash's own options) into options, image and command, and checks them.
pub fn scan(args: &[String]) -> Result<RunOptions, UsageError> {
    let mut out = RunOptions::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            out.image = rest.next().cloned().ok_or(UsageError::NoImage)?;
            break;
        }
        let options = match (arg.strip_prefix("--"), arg.strip_prefix('-')) {
            (Some(long), _) => vec![long_option(long, &mut rest)?],
            (None, Some(short)) if !short.is_empty() => short_options(short, &mut rest)?,
            _ => {
                out.image = arg.clone();
                break;
            }
        };
        for (name, value) in options {
            apply(&mut out, name, value)?;
        }
    }
    if out.image.is_empty() {
        return Err(UsageError::NoImage);
    }
    out.command = rest.cloned().collect();
    Ok(out)
}

/// The container's argv as Docker would run it: `--entrypoint` (which also drops the image's CMD) or the image's
/// entrypoint, then the command given or else the image's CMD.
pub fn container_argv(
    entrypoint: Option<&str>,
    command: &[String],
    image_entrypoint: &[String],
    image_cmd: &[String],
) -> Vec<String> {
    match entrypoint {
        Some(e) => (!e.is_empty()).then(|| e.to_owned()).into_iter().chain(command.iter().cloned()).collect(),
        None => {
            let cmd = if command.is_empty() { image_cmd } else { command };
            image_entrypoint.iter().chain(cmd).cloned().collect()
        }
    }
}

/// True when bind-mounting `source` would put the host's kernel interfaces inside: `/proc`, `/sys`, `/dev`,
/// anything under them, or a directory above them (`/`). A path with `..` counts (resolved on the host later too).
pub fn reaches_kernel_interface(source: &str) -> bool {
    let source = Path::new(source);
    if source.components().any(|c| c == Component::ParentDir) {
        return true;
    }
    KERNEL_PATHS.iter().any(|kernel| source.starts_with(kernel) || Path::new(kernel).starts_with(source))
}

/// True when bind-mounting `source` would put a container runtime's socket inside: the socket itself or a
/// directory above it (`/`, `/run`, `/var/run`). A path with `..` counts (it is resolved on the host later too).
pub fn reaches_runtime_socket(source: &str) -> bool {
    let source = Path::new(source);
    if source.components().any(|c| c == Component::ParentDir) {
        return true;
    }
    RUNTIME_SOCKETS.iter().any(|socket| Path::new(socket).starts_with(source))
}

/// One `--name[=value]`; the value comes from the next argument when the option takes one and has no `=`.
fn long_option<'a>(
    long: &str,
    rest: &mut impl Iterator<Item = &'a String>,
) -> Result<(&'static str, Option<String>), UsageError> {
    let (name, inline) = match long.split_once('=') {
        Some((n, v)) => (n, Some(v.to_owned())),
        None => (long, None),
    };
    if let Some(flag) = FLAGS.iter().find(|f| **f == name) {
        return Ok((flag, inline));
    }
    let valued = VALUED.iter().find(|v| **v == name).ok_or_else(|| UsageError::Unknown(format!("--{name}")))?;
    let value = inline.or_else(|| rest.next().cloned()).ok_or_else(|| UsageError::MissingValue(format!("--{name}")))?;
    Ok((valued, Some(value)))
}

/// Bundled short options (`-it`, `-eFOO=1`, `-e FOO=1`, `-e=FOO=1`): flags until one that takes a value, which
/// takes the rest of the bundle or else the next argument.
fn short_options<'a>(
    bundle: &str,
    rest: &mut impl Iterator<Item = &'a String>,
) -> Result<Vec<(&'static str, Option<String>)>, UsageError> {
    let mut options = Vec::new();
    for (at, letter) in bundle.char_indices() {
        let (_, name) =
            SHORT.iter().find(|(l, _)| *l == letter).ok_or_else(|| UsageError::Unknown(format!("-{letter}")))?;
        if FLAGS.contains(name) {
            options.push((*name, None));
            continue;
        }
        let tail = &bundle[at + letter.len_utf8()..];
        let tail = tail.strip_prefix('=').unwrap_or(tail);
        let value = if tail.is_empty() { rest.next().cloned() } else { Some(tail.to_owned()) };
        options.push((*name, Some(value.ok_or_else(|| UsageError::MissingValue(format!("-{letter}")))?)));
        break;
    }
    Ok(options)
}

/// Why each refused option defeats the policy (printed after the option).
const WHY_NETWORK: &str = "only `none` keeps leash's proxy the container's one way out";
const WHY_PRIVILEGED: &str = "it gives every capability (NET_ADMIN, NET_RAW) and the host's devices";
const WHY_PID_HOST: &str = "the host's processes, and through /proc their networks, come in";
const WHY_PID_CONTAINER: &str = "another container's processes, and through /proc its network, come in";
const WHY_USERNS_HOST: &str = "root in the container becomes root on the host";
const WHY_VOLUMES_FROM: &str = "it brings another container's mounts, which leash cannot check";
/// Why a volume driver other than `local` is refused.
pub const WHY_VOLUME_DRIVER: &str = "a volume plugin can mount any host path through options leash cannot check";
const WHY_API_SOCKET: &str = "it mounts the Docker socket, which can start an unfiltered container";
const WHY_IPC_HOST: &str = "the host's shared memory (/dev/shm) and System V IPC come in, where host processes talk";
const WHY_DEVICE: &str =
    "a host device is a kernel interface (a disk holds the host's files); leash cannot tell a safe one";
const WHY_DEVICE_RULE: &str = "the container may make and open the host devices it names (a disk holds the host's \
     files); leash cannot tell a safe one";
/// Why a bind reaching the host's kernel interfaces is refused (also for a source resolved on the host).
pub const WHY_KERNEL: &str = "it mounts the host's kernel interfaces (/proc, /sys, /dev, or a directory holding \
     them): host sysctls such as kernel.core_pattern, cgroup release agents, host processes' roots, devices";
const WHY_SYSTEMPATHS: &str =
    "it unmasks /proc and /sys and makes /proc/sys writable: host sysctls such as kernel.core_pattern run host code";
const WHY_SECCOMP_UNCONFINED: &str = "without Docker's seccomp profile the container reaches the host's keyrings \
     (not namespaced: root's keys are the host root's), makes user namespaces and calls the kernel where Docker \
     keeps it out";
const WHY_SECCOMP_PROFILE: &str =
    "leash cannot check what a seccomp profile in place of Docker's lets through (the host's keyrings, kernel calls)";
const WHY_APPARMOR_UNCONFINED: &str =
    "it drops the AppArmor profile that denies writes to /proc/sys, /sys/firmware and /sys/kernel/security, and mounts";
const WHY_WRITABLE_CGROUPS: &str = "a writable cgroup filesystem lets a release agent run host code";
/// Why an option cannot be used with leash at all.
const WHY_DETACH: &str =
    "leash stays in the foreground to serve the proxy; `leash docker attach` serves a container run by a harness";
const WHY_RESTART: &str = "a restarted container gets a new network namespace, without the proxy";

/// Records one option: kept, taken over by leash, refused, or unusable.
fn apply(out: &mut RunOptions, name: &'static str, value: Option<String>) -> Result<(), UsageError> {
    let normalised = match &value {
        Some(v) => format!("--{name}={v}"),
        None => format!("--{name}"),
    };
    let on = value.as_deref().is_none_or(is_true);
    let v = value.as_deref().unwrap_or_default();
    let why = match name {
        "network" | "net" if v == "none" => return Ok(()),
        "network" | "net" => Some(WHY_NETWORK),
        "privileged" if on => Some(WHY_PRIVILEGED),
        "pid" if v == "host" => Some(WHY_PID_HOST),
        "pid" if v.starts_with("container:") => Some(WHY_PID_CONTAINER),
        "userns" if v == "host" => Some(WHY_USERNS_HOST),
        "volumes-from" => Some(WHY_VOLUMES_FROM),
        "ipc" if v == "host" => Some(WHY_IPC_HOST),
        "device" => Some(WHY_DEVICE),
        "device-cgroup-rule" => Some(WHY_DEVICE_RULE),
        "security-opt" => security_opt(v),
        "volume-driver" if !is_local_driver(v) => Some(WHY_VOLUME_DRIVER),
        "use-api-socket" if on => Some(WHY_API_SOCKET),
        "cap-add" => {
            cap_add(out, &normalised, v);
            None
        }
        "volume" => {
            volume(out, &normalised, v);
            None
        }
        "mount" => {
            mount(out, &normalised, v)?;
            None
        }
        "entrypoint" => {
            out.entrypoint = value;
            return Ok(());
        }
        // leash removes the container itself, and its DNS stub is the container's only resolver.
        "rm" | "dns" => return Ok(()),
        "interactive" => {
            out.interactive = on;
            None
        }
        "detach" if on => return Err(unsupported(normalised, WHY_DETACH)),
        "restart" if v != "no" => return Err(unsupported(normalised, WHY_RESTART)),
        _ => None,
    };
    if let Some(why) = why {
        out.unsafe_options.push(Unsafe { option: normalised.clone(), why: why.to_owned() });
    }
    out.passthrough.push(normalised);
    Ok(())
}

fn unsupported(option: String, why: &'static str) -> UsageError {
    UsageError::Unsupported { option, why }
}

/// Docker's (Go's) spellings of true.
fn is_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// One `--security-opt`, split as Docker splits it (at the first `=`, else the first `:`); keys and the words
/// compared in any case, which refuses only spellings Docker would reject anyway. `systempaths=unconfined` (the
/// CLI's), `seccomp=unconfined` or a profile file (read by the CLI, sent whole), `apparmor=unconfined` and
/// `writable-cgroups` other than false are refused; `label`, `no-new-privileges`, another AppArmor profile and
/// `seccomp=builtin` pass.
fn security_opt(value: &str) -> Option<&'static str> {
    let (key, word) = value.split_once('=').or_else(|| value.split_once(':')).unwrap_or((value, ""));
    let (key, word) = (go_lowercase(key), go_lowercase(word));
    match key.as_str() {
        "systempaths" => Some(WHY_SYSTEMPATHS),
        "seccomp" if word == "unconfined" => Some(WHY_SECCOMP_UNCONFINED),
        "seccomp" if word != "builtin" => Some(WHY_SECCOMP_PROFILE),
        "apparmor" if word == "unconfined" => Some(WHY_APPARMOR_UNCONFINED),
        "writable-cgroups" if !is_false(&word) => Some(WHY_WRITABLE_CGROUPS),
        _ => None,
    }
}

/// Docker's (Go's) spellings of false, lowercased.
fn is_false(v: &str) -> bool {
    matches!(v, "0" | "f" | "false")
}

fn cap_add(out: &mut RunOptions, normalised: &str, value: &str) {
    for cap in value.split(',') {
        let upper = cap.trim().to_ascii_uppercase();
        let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
        if let Some((_, why)) = REFUSED_CAPS.iter().find(|(c, _)| *c == bare) {
            out.unsafe_options.push(Unsafe { option: normalised.to_owned(), why: format!("{bare}: {why}") });
        }
    }
}

/// `-v SRC:DST[:OPTS]`: SRC is a host path when it starts with `/` or `.` (else a named volume); a lone `-v /path`
/// is an anonymous volume at that path in the container, no host path at all.
fn volume(out: &mut RunOptions, normalised: &str, value: &str) {
    if let Some((source, _)) = value.split_once(':') {
        if source.starts_with('/') || source.starts_with('.') {
            bind_source(out, normalised, source);
        } else if !source.is_empty() {
            out.named_volumes.push((normalised.to_owned(), source.to_owned()));
        }
    }
}

/// `--mount` read as Docker's CLI reads it (opts/mount.go): one CSV record (Go's encoding/csv), each field
/// `key=value` (a field without `=` is a flag such as `readonly`), keys and the `type` lowercased the way Go does,
/// the last of a repeated key winning, `type` `volume` when not given. The source of a `bind` (or `npipe`) mount is
/// checked like `-v`'s; a `volume` whose local driver is told to mount a host path or device (`volume-opt=device=…`,
/// `volume-opt=o=bind`) is refused; `tmpfs` and `image` mounts name nothing of the host; any other type is refused
/// as one leash cannot check.
fn mount(out: &mut RunOptions, normalised: &str, value: &str) -> Result<(), UsageError> {
    let fields = csv_fields(value).ok_or_else(|| unsupported(normalised.to_owned(), WHY_MOUNT_CSV))?;
    let mut kind = "volume".to_owned();
    let mut source = None;
    let mut host_volume = None;
    let mut driver = None;
    for field in &fields {
        let Some((key, val)) = field.split_once('=') else { continue };
        match go_lowercase(key).as_str() {
            "type" => kind = go_lowercase(val),
            "source" | "src" => source = Some(val),
            "volume-driver" => driver = Some(val),
            "volume-opt" => {
                let (opt, opt_value) = val.split_once('=').unwrap_or((val, ""));
                if binds_host_path(opt, opt_value) {
                    host_volume = Some(val);
                }
            }
            _ => {}
        }
    }
    let refuse =
        |out: &mut RunOptions, why: String| out.unsafe_options.push(Unsafe { option: normalised.to_owned(), why });
    // Volume options are Docker's error on another type; checked whatever the type, as leash does not rely on that.
    if let Some(opt) = host_volume {
        refuse(
            out,
            format!("`volume-opt={opt}` has the volume driver mount a host path or device, which leash cannot check"),
        );
    }
    if let Some(driver) = driver.filter(|d| !is_local_driver(d)) {
        refuse(out, format!("`volume-driver={driver}`: {WHY_VOLUME_DRIVER}"));
    }
    match kind.as_str() {
        "bind" | "npipe" => {
            if let Some(source) = source {
                bind_source(out, normalised, source);
            }
        }
        "volume" => {
            if let Some(name) = source.filter(|s| !s.is_empty()) {
                out.named_volumes.push((normalised.to_owned(), name.to_owned()));
            }
        }
        "tmpfs" | "image" => {}
        other => refuse(out, format!("leash cannot check what a `type={other}` mount brings in")),
    }
    Ok(())
}

/// Why a `--mount` value that is not one CSV record (as Go's encoding/csv reads it) is not used.
const WHY_MOUNT_CSV: &str =
    "its value is not one CSV record as Docker reads it (a quote out of place, an unclosed quote, or a line break)";

/// One CSV record as Go's encoding/csv reads it (default settings, as Docker's `--mount` parser): fields split on
/// `,`; a field that starts with `"` is quoted, `""` in it a literal quote and `,` plain text, and only `,` or the
/// end may follow its closing quote; a quote anywhere else is an error, and so is a line break here (Go would read
/// the first line only, after skipping empty ones). Nothing is trimmed.
fn csv_fields(record: &str) -> Option<Vec<String>> {
    if record.contains(['\n', '\r']) {
        return None;
    }
    let mut fields = Vec::new();
    let mut chars = record.chars().peekable();
    loop {
        let mut field = String::new();
        let more = if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next()? {
                    '"' if chars.next_if_eq(&'"').is_some() => field.push('"'),
                    '"' => break,
                    c => field.push(c),
                }
            }
            match chars.next() {
                None => false,
                Some(',') => true,
                Some(_) => return None,
            }
        } else {
            loop {
                match chars.next() {
                    None => break false,
                    Some(',') => break true,
                    Some('"') => return None,
                    Some(c) => field.push(c),
                }
            }
        };
        fields.push(field);
        if !more {
            return Some(fields);
        }
    }
}

/// True if a local volume's driver option `key=value` has it mount a host path or device (`device=…`, an `o=` with
/// `bind`): for `--mount … volume-opt=` and for a volume that already exists ([`crate::host`]).
pub fn binds_host_path(key: &str, value: &str) -> bool {
    let key = go_lowercase(key);
    key == "device" || (key == "o" && go_lowercase(value).contains("bind"))
}

/// True for the one volume driver leash can check, `local`; a plugin can mount any host path.
pub fn is_local_driver(driver: &str) -> bool {
    go_lowercase(driver) == "local"
}

/// Go's `strings.ToLower`: Unicode simple lowercasing, one rune for one, so `İ` (U+0130) becomes a plain `i`
/// (`type=BİND` is a bind mount to Docker) where Rust's `to_lowercase` gives `i` and a combining dot.
fn go_lowercase(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{130}' => 'i',
            c => {
                let mut lower = c.to_lowercase();
                match (lower.next(), lower.next()) {
                    (Some(l), None) => l,
                    _ => c,
                }
            }
        })
        .collect()
}

/// A bind source: refused on its face when it reaches a runtime socket or the kernel's interfaces, else kept for
/// the host-side check.
fn bind_source(out: &mut RunOptions, normalised: &str, source: &str) {
    let why = if reaches_runtime_socket(source) {
        "it mounts the Docker socket (or a directory holding it), which can start an unfiltered container"
    } else if reaches_kernel_interface(source) {
        WHY_KERNEL
    } else {
        out.bind_sources.push((normalised.to_owned(), source.to_owned()));
        return;
    };
    out.unsafe_options.push(Unsafe { option: normalised.to_owned(), why: why.into() });
}

#[cfg(test)]
mod tests {

    use super::*;

    fn scan_words(line: &str) -> Result<RunOptions, UsageError> {
        scan(&line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
    }

    fn refused(line: &str) -> Vec<String> {
        scan_words(line).unwrap().unsafe_options.into_iter().map(|u| u.option).collect()
    }

    #[test]
    fn image_and_command_are_found_after_every_option_spelling() {
        let o =
            scan_words("-it --name x -e A=1 -eB=2 -e=C=3 --env=D=4 -v /data:/data -w /w --rm img sh -c true").unwrap();
        assert_eq!(o.image, "img");
        assert_eq!(o.command, ["sh", "-c", "true"]);
        assert!(o.interactive);
        assert_eq!(
            o.passthrough,
            [
                "--interactive",
                "--tty",
                "--name=x",
                "--env=A=1",
                "--env=B=2",
                "--env=C=3",
                "--env=D=4",
                "--volume=/data:/data",
                "--workdir=/w"
            ]
        );
        assert_eq!(o.bind_sources, [("--volume=/data:/data".to_owned(), "/data".to_owned())]);
        assert!(o.unsafe_options.is_empty());
    }

    #[test]
    fn options_after_the_image_belong_to_the_command() {
        let o = scan_words("img --privileged --network=host").unwrap();
        assert_eq!(o.command, ["--privileged", "--network=host"]);
        assert!(o.unsafe_options.is_empty());
        let o = scan_words("--init -- img -x").unwrap();
        assert_eq!((o.image.as_str(), o.command.as_slice()), ("img", ["-x".to_owned()].as_slice()));
    }

    #[test]
    fn networks_other_than_none_are_refused_in_every_spelling() {
        for line in ["--network=host i", "--network host i", "--net=host i", "--net host i", "--network bridge i"] {
            assert_eq!(refused(line).len(), 1, "{line}");
        }
        assert_eq!(refused("--network container:abc i"), ["--network=container:abc"]);
        let o = scan_words("--network none --net=none i").unwrap();
        assert!(o.unsafe_options.is_empty() && o.passthrough.is_empty(), "{o:?}");
    }

    #[test]
    fn privileged_is_refused_unless_false() {
        assert_eq!(refused("--privileged i"), ["--privileged"]);
        assert_eq!(refused("--privileged=true i"), ["--privileged=true"]);
        assert!(refused("--privileged=false i").is_empty());
    }

    #[test]
    fn network_and_escape_capabilities_are_refused_in_any_case_and_prefix() {
        for cap in ["NET_ADMIN", "net_raw", "CAP_NET_RAW", "ALL", "all", "SYS_ADMIN", "cap_sys_module"] {
            assert_eq!(refused(&format!("--cap-add {cap} i")).len(), 1, "{cap}");
            assert_eq!(refused(&format!("--cap-add={cap} i")).len(), 1, "{cap}");
        }
        assert!(refused("--cap-add CHOWN --cap-drop ALL i").is_empty());
    }

    #[test]
    fn host_and_shared_namespaces_are_refused_but_uts_host_is_fine() {
        assert_eq!(refused("--pid host i"), ["--pid=host"]);
        assert_eq!(refused("--pid=container:db i"), ["--pid=container:db"]);
        assert_eq!(refused("--userns=host i"), ["--userns=host"]);
        assert!(refused("--uts host --ipc private i").is_empty());
    }

    #[test]
    fn the_docker_socket_is_refused_however_it_is_mounted() {
        for line in [
            "-v /var/run/docker.sock:/var/run/docker.sock i",
            "-v=/run/docker.sock:/s i",
            "--volume /var/run:/host-run:ro i",
            "-v /:/host i",
            "-v /run/:/r i",
            "-v /tmp/../run/docker.sock:/s i",
            "--mount type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock i",
            "--mount=type=bind,src=/run,dst=/r,readonly i",
            "--mount target=/s,type=bind,source=/var/run/docker.sock i",
            "--volumes-from other i",
            "--use-api-socket i",
        ] {
            assert_eq!(refused(line).len(), 1, "{line}");
        }
        assert!(refused("-v /data:/data -v named:/x --mount type=volume,source=docker.sock,target=/x i").is_empty());
        assert!(refused("-v /var/run i").is_empty(), "an anonymous volume at /var/run mounts nothing of the host");
    }

    /// The one refusal of `line` and its reason.
    fn refusal(line: &str) -> Unsafe {
        let o = scan_words(line).unwrap();
        assert_eq!(o.unsafe_options.len(), 1, "{line}: {o:?}");
        o.unsafe_options[0].clone()
    }

    #[test]
    fn a_bind_of_the_hosts_proc_sys_or_dev_is_refused_in_every_spelling() {
        for line in [
            "-v /proc:/hostproc i",
            "-v=/proc:/hostproc:ro i",
            "--volume /proc/:/p i",
            "--volume=/proc/sys/kernel:/k i",
            "-v /proc/1/root:/r i",
            "-v /sys:/s i",
            "-v /sys/fs/cgroup:/cg:ro i",
            "-v /sys/kernel/debug:/d i",
            "-v /dev:/d i",
            "-v /dev/sda1:/disk i",
            "-v /dev/shm:/shm i",
            "-v //proc:/p i",
            "-v /./sys/./fs:/f i",
            "--mount type=bind,source=/proc,target=/hostproc i",
            "--mount TYPE=BIND,SRC=/sys/fs/cgroup,DST=/cg,readonly i",
            "--mount Type=bInD,Source=/dev,Target=/d i",
            "--mount type=B\u{130}ND,src=/proc/sys,dst=/x i",
            "--mount target=/p,type=bind,src=/proc i",
            "--mount type=bind,source=/tmp,source=/proc,target=/p i",
            "--mount type=npipe,source=/proc,target=/p i",
        ] {
            let u = refusal(line);
            assert!(u.why.contains("kernel interfaces"), "{line}: {}", u.why);
            assert_eq!(u.option, scan_words(line).unwrap().passthrough[0], "the option is named");
        }
        assert_eq!(refused("-v /tmp/../proc:/p i"), ["--volume=/tmp/../proc:/p"], "`..` is refused on its face");
        for value in [r#""type=bind","source=/proc","target=/p""#, r#"type=bind,"src=/sys",dst=/s"#] {
            let why = mount_refusal(value);
            assert!(why.contains("kernel interfaces"), "{value}: {why}");
        }
    }

    #[test]
    fn a_bind_of_a_directory_above_the_kernels_interfaces_is_refused() {
        for line in ["-v /:/host i", "-v //:/host i", "--mount type=bind,src=/,dst=/host i"] {
            let u = refusal(line);
            assert_eq!(u.option, scan_words(line).unwrap().passthrough[0], "the option is named");
        }
        assert!(reaches_kernel_interface("/"));
        assert!(reaches_kernel_interface("/proc"));
        assert!(reaches_kernel_interface("/sys/fs/cgroup/memory"));
        for fine in ["/procfs", "/system", "/devices", "/srv/proc", "/home/u/dev", "/tmp", "relative/dev"] {
            assert!(!reaches_kernel_interface(fine), "{fine}");
        }
        assert!(refused("-v /srv/proc:/p -v /home/dev:/d -v /devel:/x i").is_empty());
    }

    #[test]
    fn options_that_unmask_the_kernels_interfaces_are_refused() {
        for (line, word) in [
            ("--security-opt systempaths=unconfined i", "unmasks /proc"),
            ("--security-opt=systempaths=unconfined i", "unmasks /proc"),
            ("--security-opt systempaths:unconfined i", "unmasks /proc"),
            ("--security-opt seccomp=unconfined i", "keyrings"),
            ("--security-opt seccomp:unconfined i", "keyrings"),
            ("--security-opt Seccomp=Unconfined i", "keyrings"),
            ("--security-opt seccomp=/etc/allow-all.json i", "cannot check"),
            ("--security-opt apparmor=unconfined i", "AppArmor"),
            ("--security-opt apparmor:unconfined i", "AppArmor"),
            ("--security-opt writable-cgroups=true i", "release agent"),
            ("--security-opt writable-cgroups=1 i", "release agent"),
            ("--device /dev/sda i", "disk"),
            ("--device=/dev/mem:/dev/mem:rwm i", "disk"),
            ("--cap-add SYS_PTRACE i", "SYS_PTRACE"),
            ("--cap-add=cap_sys_ptrace i", "SYS_PTRACE"),
            ("--cap-add chown,SYS_RAWIO i", "SYS_RAWIO"),
            ("--ipc host i", "/dev/shm"),
        ] {
            let u = refusal(line);
            assert!(u.why.contains(word), "{line}: {}", u.why);
        }
        let o = scan(&["--device-cgroup-rule".into(), "b *:* rwm".into(), "i".into()]).unwrap();
        assert_eq!(o.unsafe_options.len(), 1, "{o:?}");
        assert!(o.unsafe_options[0].why.contains("disk"), "{o:?}");
        let fine = "--security-opt no-new-privileges --security-opt label=level:s0:c100 --security-opt \
                    apparmor=my-profile --security-opt seccomp=builtin --security-opt writable-cgroups=false \
                    --tmpfs /scratch --mount type=tmpfs,dst=/t --ipc private --ipc shareable --cap-add CHOWN i";
        assert!(refused(fine).is_empty());
    }

    #[test]
    fn volume_drivers_but_local_are_refused_and_named_volumes_go_to_the_daemon_check() {
        for line in [
            "--volume-driver=nfsplugin i",
            "--volume-driver Convoy i",
            "--mount type=volume,src=v,dst=/x,volume-driver=rexray i",
            "--mount TYPE=VOLUME,SRC=v,DST=/x,VOLUME-DRIVER=Rexray i",
        ] {
            assert_eq!(refused(line).len(), 1, "{line}");
        }
        assert!(refused("--volume-driver local --mount type=volume,src=v,dst=/x,volume-driver=LOCAL i").is_empty());
        let o = scan_words(
            "-v cache:/c -v /data:/data -v /anon --mount type=volume,src=work,dst=/w --mount type=tmpfs,dst=/t i",
        )
        .unwrap();
        let names: Vec<_> = o.named_volumes.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["cache", "work"]);
    }

    /// The one refusal of `--mount VALUE`, and its reason.
    fn mount_refusal(value: &str) -> String {
        let o = scan(&["--mount".to_owned(), value.to_owned(), "i".to_owned()]).unwrap();
        assert_eq!(o.unsafe_options.len(), 1, "{value}: {o:?}");
        assert_eq!(o.unsafe_options[0].option, format!("--mount={value}"), "the option is named");
        o.unsafe_options[0].why.clone()
    }

    #[test]
    fn a_mount_with_its_type_key_in_capitals_is_refused() {
        let why = mount_refusal("TYPE=BIND,source=/var/run/docker.sock,target=/s");
        assert!(why.contains("Docker socket"), "{why}");
    }

    #[test]
    fn a_mount_with_its_type_in_mixed_case_is_refused() {
        let why = mount_refusal("type=Bind,source=/var/run/docker.sock,target=/s");
        assert!(why.contains("Docker socket"), "{why}");
    }

    #[test]
    fn a_mount_with_a_quoted_type_field_is_refused() {
        let why = mount_refusal(r#""type=bind",source=/var/run/docker.sock,target=/s"#);
        assert!(why.contains("Docker socket"), "{why}");
    }

    #[test]
    fn a_volume_the_local_driver_binds_to_a_host_directory_is_refused() {
        let why = mount_refusal(
            "type=volume,dst=/x,volume-driver=local,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/var/run",
        );
        assert!(why.contains("volume-opt=") && why.contains("host path"), "{why}");
    }

    #[test]
    fn the_docker_socket_is_refused_in_every_mount_spelling() {
        for value in [
            "type=bind,src=/var/run/docker.sock,dst=/s",
            "type=bind,source=/run/docker.sock,destination=/s",
            "Type=bInD,SRC=/run/docker.sock,Target=/s",
            "type=BIND,Source=/run/containerd/containerd.sock,target=/s",
            // Go lowercases U+0130 to a plain `i`: this is a bind mount to Docker.
            "type=B\u{130}ND,source=/var/run/docker.sock,target=/s",
            r#""type=bind","source=/var/run/docker.sock","target=/s""#,
            r#"target=/s,"type=bind","src=/var/run/docker.sock""#,
            r#"type=bind,"source=/var/run/docker.sock",readonly"#,
            // Directories above the socket.
            "type=bind,source=/var/run,target=/r",
            "type=bind,source=/var/run/,target=/r",
            "type=bind,source=/run,target=/r",
            "type=bind,source=/,target=/host",
            "type=bind,source=/tmp/../var/run/docker.sock,target=/s",
            "type=bind,source=/var/run/./docker.sock,target=/s",
            "type=bind,source=//var//run,target=/r",
            // The last of a repeated key wins, as in Docker.
            "type=bind,source=/tmp,source=/var/run/docker.sock,target=/s",
            "type=volume,source=/run,type=bind,target=/s",
            // npipe names a host path like bind.
            "type=npipe,source=/var/run/docker.sock,target=/s",
        ] {
            let why = mount_refusal(value);
            assert!(why.contains("Docker socket"), "{value}: {why}");
        }
    }

    #[test]
    fn volumes_the_driver_would_mount_from_the_host_are_refused() {
        for value in [
            "dst=/x,volume-opt=device=/var/run",
            "type=volume,dst=/x,volume-opt=type=none,volume-opt=o=rbind,volume-opt=device=/srv",
            "type=volume,dst=/x,volume-opt=o=bind",
            r#"type=volume,dst=/x,"volume-opt=o=ro,bind""#,
            "type=volume,dst=/x,VOLUME-OPT=DEVICE=/dev/sda1",
            "type=volume,dst=/x,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/proc",
            "type=volume,dst=/x,volume-opt=device=:/export,volume-opt=type=nfs",
        ] {
            let why = mount_refusal(value);
            assert!(why.contains("volume-opt="), "{value}: {why}");
        }
    }

    #[test]
    fn mount_types_leash_cannot_check_are_refused() {
        for value in ["type=cluster,source=shared,target=/x", "type=bind ,source=/tmp,target=/x", "type=,target=/x"] {
            let why = mount_refusal(value);
            assert!(why.contains("cannot check"), "{value}: {why}");
        }
    }

    #[test]
    fn a_mount_docker_would_not_read_as_csv_is_a_usage_error() {
        for value in [
            r#"type="bind",source=/var/run/docker.sock,target=/s"#,
            r#""type=bind,source=/var/run/docker.sock,target=/s"#,
            r#""type=bind"x,source=/var/run/docker.sock,target=/s"#,
            "type=volume,target=/x\ntype=bind,source=/var/run/docker.sock,target=/s",
            "\ntype=bind,source=/var/run/docker.sock,target=/s",
            "type=bind,source=/var/run/docker.sock,target=/s\r",
        ] {
            let e = scan(&["--mount".to_owned(), value.to_owned(), "i".to_owned()]).unwrap_err();
            assert!(matches!(&e, UsageError::Unsupported { option, .. } if option.starts_with("--mount=")), "{e}");
            assert!(e.to_string().contains("CSV"), "{e}");
        }
    }

    #[test]
    fn ordinary_mounts_pass_and_bind_sources_go_to_the_host_side_check() {
        for line in [
            "--mount type=bind,src=/tmp/x,dst=/x i",
            "--mount type=volume,src=myvol,dst=/data i",
            "--mount src=myvol,dst=/data,volume-nocopy i",
            "--mount type=volume,dst=/data,volume-driver=local,volume-opt=size=1g i",
            "--mount type=tmpfs,dst=/t,tmpfs-size=64m i",
            "--mount type=image,source=alpine,target=/img i",
            "--mount type=volume,source=docker.sock,target=/x i",
        ] {
            assert!(refused(line).is_empty(), "{line}");
        }
        let o =
            scan_words("--mount type=bind,src=/tmp/x,dst=/x --mount TYPE=Bind,source=/tmp/link,target=/l i").unwrap();
        let sources: Vec<_> = o.bind_sources.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(sources, ["/tmp/x", "/tmp/link"], "symlinks are resolved on the host (host.rs)");
        let o = scan(&["--mount".into(), r#"type=bind,"src=/tmp/a,b",dst=/x"#.into(), "i".into()]).unwrap();
        assert_eq!(o.bind_sources, [(r#"--mount=type=bind,"src=/tmp/a,b",dst=/x"#.to_owned(), "/tmp/a,b".to_owned())]);
    }

    #[test]
    fn csv_fields_read_as_gos_encoding_csv() {
        let f = |s: &str| csv_fields(s).map(|v| v.join("|"));
        assert_eq!(f("a,b,c").as_deref(), Some("a|b|c"));
        assert_eq!(f(r#""a,b",c"#).as_deref(), Some("a,b|c"));
        assert_eq!(f(r#""say ""hi""",x"#).as_deref(), Some(r#"say "hi"|x"#));
        assert_eq!(f(r#""""#).as_deref(), Some(""));
        assert_eq!(f("a,,").as_deref(), Some("a||"));
        assert_eq!(f(" a , b").as_deref(), Some(" a | b"), "nothing is trimmed");
        assert_eq!(f(""), Some(String::new()));
        for bad in [r#"a"b"#, r#""a"b"#, r#""a"#, r#" "a""#, "a\nb"] {
            assert_eq!(f(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_lowercase_maps_one_rune_to_one() {
        assert_eq!(go_lowercase("TyPe"), "type");
        assert_eq!(go_lowercase("B\u{130}ND"), "bind");
        assert_eq!(go_lowercase("\u{212a}"), "k");
    }

    #[test]
    fn leash_takes_over_rm_entrypoint_and_dns_and_refuses_detach_and_restart() {
        let o = scan_words("--rm --entrypoint /bin/app --dns 8.8.8.8 i").unwrap();
        assert_eq!(o.entrypoint.as_deref(), Some("/bin/app"));
        assert!(o.passthrough.is_empty());
        assert!(matches!(scan_words("-d i"), Err(UsageError::Unsupported { .. })));
        assert!(matches!(scan_words("-dit i"), Err(UsageError::Unsupported { .. })));
        assert!(matches!(scan_words("--restart always i"), Err(UsageError::Unsupported { .. })));
        assert!(scan_words("--restart=no --detach=false i").is_ok());
    }

    #[test]
    fn unknown_options_missing_values_and_no_image_are_usage_errors() {
        assert_eq!(scan_words("--frobnicate i"), Err(UsageError::Unknown("--frobnicate".into())));
        assert_eq!(scan_words("-Z i"), Err(UsageError::Unknown("-Z".into())));
        let late = scan_words("--name x --allow a.test i").unwrap_err();
        assert!(late.to_string().contains("leash's options come before docker's"), "{late}");
        assert_eq!(scan_words("--name"), Err(UsageError::MissingValue("--name".into())));
        assert_eq!(scan_words("-it"), Err(UsageError::NoImage));
        assert_eq!(scan_words(""), Err(UsageError::NoImage));
    }

    #[test]
    fn the_container_argv_follows_dockers_rules() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (ep, cmd) = (s(&["/entry"]), s(&["serve"]));
        assert_eq!(container_argv(None, &[], &ep, &cmd), s(&["/entry", "serve"]));
        assert_eq!(container_argv(None, &s(&["x"]), &ep, &cmd), s(&["/entry", "x"]));
        assert_eq!(container_argv(Some("/other"), &[], &ep, &cmd), s(&["/other"]));
        assert_eq!(container_argv(Some(""), &s(&["sh"]), &ep, &cmd), s(&["sh"]));
        assert_eq!(container_argv(None, &[], &[], &cmd), s(&["serve"]));
    }
}
