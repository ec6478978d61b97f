//! `leash docker run` refusing what reaches past what leash trusts (issue 41, class 4): binds of the host's kernel
//! interfaces (`/proc`, `/sys`, `/dev`, a directory above them, a symlink to them) and the options that unmask them,
//! and binds of leash's own files (the policy, the audit log, a `file:` secret, the kept run logs, ask mode's control
//! socket, the default one included). Each is refused with exit 2 naming the option and why, before any container
//! exists; an ordinary bind and a tmpfs beside the same files still run.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use super::{assert_no_new_network, bounded, docker_ready, label, leftovers, networks, IMAGE, LEASH};
use crate::common::stderr;

/// `leash docker run LEASH_ARGS --label LABEL DOCKER_ARGS IMAGE true`, with the kept run logs under `state`.
fn run(state: &Path, leash_args: &[String], label: &str, docker_args: &[String]) -> Output {
    bounded(
        Command::new(LEASH)
            .env("XDG_STATE_HOME", state)
            .args(["docker", "run"])
            .args(leash_args)
            .args(["--label", label])
            .args(docker_args)
            .args([IMAGE, "true"]),
    )
}

/// Refused with exit 2, `option` named as leash normalised it, the reason containing `why`.
fn assert_refused(o: &Output, option: &str, why: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "`{option}` was not refused: {err}");
    assert!(err.contains(&format!("refusing `{option}`")), "`{option}` is named: {err}");
    assert!(err.contains(why), "`{option}`: the reason says `{why}`: {err}");
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn docker_run_refuses_binds_and_options_that_reach_the_hosts_kernel_interfaces() {
    let dir = tempfile::tempdir().unwrap();
    let (to_proc, to_cgroup) = (dir.path().join("to-proc"), dir.path().join("to-cgroup"));
    std::os::unix::fs::symlink("/proc", &to_proc).unwrap();
    std::os::unix::fs::symlink("/sys/fs/cgroup", &to_cgroup).unwrap();
    let (to_proc, to_cgroup) = (to_proc.display().to_string(), to_cgroup.display().to_string());
    let kernel = "kernel interfaces";
    let cases: Vec<(Vec<String>, String, &str)> = vec![
        (strings(&["-v", "/proc:/hostproc"]), "--volume=/proc:/hostproc".into(), kernel),
        (strings(&["--volume=/sys/fs/cgroup:/cg:ro"]), "--volume=/sys/fs/cgroup:/cg:ro".into(), kernel),
        (strings(&["-v", "/sys:/s"]), "--volume=/sys:/s".into(), kernel),
        (strings(&["-v", "/dev:/d"]), "--volume=/dev:/d".into(), kernel),
        (
            strings(&["--mount", "type=bind,source=/dev,target=/d"]),
            "--mount=type=bind,source=/dev,target=/d".into(),
            kernel,
        ),
        (
            strings(&["--mount", "\"Type=Bind\",SRC=/proc/sys,dst=/x"]),
            "--mount=\"Type=Bind\",SRC=/proc/sys,dst=/x".into(),
            kernel,
        ),
        // Resolved on the host: a symlink into /proc or /sys.
        (vec!["-v".into(), format!("{to_proc}:/p")], format!("--volume={to_proc}:/p"), kernel),
        (
            vec!["--mount".into(), format!("type=bind,src={to_cgroup}/memory,dst=/m")],
            format!("--mount=type=bind,src={to_cgroup}/memory,dst=/m"),
            kernel,
        ),
        (
            strings(&["--mount", "type=volume,dst=/x,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/proc"]),
            "--mount=type=volume,dst=/x,volume-opt=type=none,volume-opt=o=bind,volume-opt=device=/proc".into(),
            "volume-opt=",
        ),
        // Options that unmask them, or hand the container a kernel interface of their own.
        (
            strings(&["--security-opt", "systempaths=unconfined"]),
            "--security-opt=systempaths=unconfined".into(),
            "unmasks",
        ),
        (strings(&["--security-opt", "seccomp=unconfined"]), "--security-opt=seccomp=unconfined".into(), "keyrings"),
        (strings(&["--security-opt=apparmor=unconfined"]), "--security-opt=apparmor=unconfined".into(), "AppArmor"),
        (strings(&["--device", "/dev/null"]), "--device=/dev/null".into(), "host device"),
        (strings(&["--device-cgroup-rule", "b *:* rwm"]), "--device-cgroup-rule=b *:* rwm".into(), "host devices"),
        (strings(&["--cap-add", "SYS_PTRACE"]), "--cap-add=SYS_PTRACE".into(), "SYS_PTRACE"),
        (strings(&["--ipc", "host"]), "--ipc=host".into(), "/dev/shm"),
    ];
    let label = label("kernel");
    let nets = networks();
    for (args, option, why) in &cases {
        let o = run(dir.path(), &strings(&["--allow", "docs.test"]), &label, args);
        assert_refused(&o, option, why);
    }
    if docker_ready() {
        assert_eq!(leftovers(&label), "", "a refused run created a container");
        assert_no_new_network(&nets);
        // A plain directory and a tmpfs are still fine.
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let args = vec!["-v".into(), format!("{}:/data", data.display()), "--tmpfs".into(), "/scratch".into()];
        let o = run(dir.path(), &strings(&["--allow", "docs.test"]), &label, &args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(leftovers(&label), "", "a container was left behind");
    }
}

#[test]
fn docker_run_refuses_binds_that_reach_leashs_own_files_and_control_socket() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir(&p).unwrap();
        p
    };
    let (conf, secrets, logs, ask, state) = (d("conf"), d("secrets"), d("logs"), d("ask"), d("state"));
    std::fs::set_permissions(&ask, std::fs::Permissions::from_mode(0o700)).unwrap();
    let key = secrets.join("anthropic");
    std::fs::write(&key, "sk-ant-real-7f3a9c2e1b5d4f6a8091a2b3c4d5e6f7\n").unwrap();
    let policy = conf.join("policy.yaml");
    let text = format!(
        "network:\n  mode: allowlist\n  allowed_hosts: [docs.test]\n  credentials:\n    - preset: anthropic\n      \
         hosts: [docs.test]\n      file: {}\n",
        key.display()
    );
    std::fs::write(&policy, text).unwrap();
    let link = dir.path().join("to-conf");
    std::os::unix::fs::symlink(&conf, &link).unwrap();
    let log = logs.join("audit.jsonl");
    let socket = ask.join("s.sock");
    let leash_args = vec![
        "--policy".into(),
        policy.display().to_string(),
        "--log".into(),
        log.display().to_string(),
        "--ask".into(),
        "--ask-socket".into(),
        socket.display().to_string(),
    ];
    let v = |source: &Path, rest: &str| vec!["-v".to_owned(), format!("{}:{rest}", source.display())];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (v(&conf, "/conf"), "policy"),
        (v(&policy, "/p.yaml:ro"), "policy"),
        (v(&link, "/c"), "policy"),
        (vec!["--mount".into(), format!("type=bind,src={},dst=/k,readonly", key.display())], "secret"),
        (v(&secrets, "/s"), "secret"),
        (v(&logs, "/l"), "audit log"),
        // The kept run logs' directory (state/leash/runs) does not exist yet: a bind above it is refused all the same.
        (v(&state, "/state"), "run logs"),
        // Ask mode's control socket is made before the check: a bind of its directory would answer the questions.
        (v(&ask, "/ask"), "control socket"),
        (v(dir.path(), "/all"), "leash's own"),
    ];
    let label = label("leash-files");
    let nets = networks();
    for (args, why) in &cases {
        let o = run(&state, &leash_args, &label, args);
        let option = format!("--{}={}", if args[0] == "-v" { "volume" } else { "mount" }, args[1]);
        assert_refused(&o, &option, why);
        assert!(!stderr(&o).contains("sk-ant-real"), "the secret is never printed: {}", stderr(&o));
    }
    assert!(!socket.exists(), "the control socket is removed after a refusal");
    // The default control socket too: made in $XDG_RUNTIME_DIR/leash before the check.
    let runtime = d("runtime");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = bounded(
        Command::new(LEASH)
            .env("XDG_STATE_HOME", &state)
            .env("XDG_RUNTIME_DIR", &runtime)
            .args(["docker", "run", "--allow", "docs.test", "--ask", "--label", &label])
            .args(v(&runtime, "/run-user"))
            .args([IMAGE, "true"]),
    );
    assert_refused(&o, &format!("--volume={}:/run-user", runtime.display()), "control socket");
    if docker_ready() {
        assert_eq!(leftovers(&label), "", "a refused run created a container");
        assert_no_new_network(&nets);
        // A directory beside leash's files is still fine.
        let o = run(&state, &leash_args, &label, &v(&d("data"), "/data"));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(leftovers(&label), "", "a container was left behind");
    }
}
