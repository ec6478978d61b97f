//! What the person at the terminal sees, read from a real terminal emulator: `leash run --ask` in a tmux pane, the
//! screen read back with `tmux capture-pane` (the picture tmux draws, with its attributes) while the question is up.
//! The command does all it can to the terminal first — a scroll region with a fake question outside it, autowrap
//! off, a line-drawing character set shifted in, concealed text, origin mode, an OSC left open — and writes to the
//! operator's clipboard; the question must still be on the cursor's line, the host first and whole, in plain text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::sandbox_available;
use crate::scene::{path, until, Scene, LEASH};

/// The pane's size: a long host name wraps over two lines of it.
const COLUMNS: u16 = 100;
const ROWS: u16 = 30;

/// A tmux server of the test's own (its own socket, no user configuration), with one pane running a command; the
/// server is killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// A detached session running `argv` in a `COLUMNS`x`ROWS` pane that stays once the command ends, with OSC 52
    /// from the pane taken into tmux's paste buffers (`set-clipboard on`), as an operator's tmux would.
    fn run(dir: &Path, argv: &[String]) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(std::env::var_os("LEASH_REQUIRE_TMUX").is_none(), "tmux is missing but LEASH_REQUIRE_TMUX is set");
            eprintln!("SKIPPED: tmux is not installed; the terminal-state tests did not run");
            return None;
        }
        let config = dir.join("tmux.conf");
        std::fs::write(&config, "set -g remain-on-exit on\nset -g set-clipboard on\nset -g history-limit 1000\n")
            .unwrap();
        let tmux = Tmux { socket: dir.join("tmux.sock") };
        let (x, y) = (COLUMNS.to_string(), ROWS.to_string());
        let mut args = vec!["-f".to_owned(), config.to_str().unwrap().to_owned()];
        args.extend(["new-session", "-d", "-x", &x, "-y", &y, "-s", "t"].map(str::to_owned));
        args.extend(argv.iter().cloned());
        let o = tmux.cmd(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(o.status.success(), "tmux: {}", String::from_utf8_lossy(&o.stderr));
        Some(tmux)
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().unwrap()
    }

    fn text(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.cmd(args).stdout).into_owned()
    }

    /// The screen as lines, wrapped lines joined (`-J`); with `-e`, attributes as SGR sequences.
    fn screen(&self, attributes: bool) -> Vec<String> {
        let args: &[&str] = if attributes {
            &["capture-pane", "-p", "-J", "-e", "-t", "t"]
        } else {
            &["capture-pane", "-p", "-J", "-t", "t"]
        };
        self.text(args).lines().map(str::to_owned).collect()
    }

    /// The scrollback and the screen, as lines, wrapped lines joined.
    fn history(&self) -> Vec<String> {
        self.text(&["capture-pane", "-p", "-J", "-S", "-", "-t", "t"]).lines().map(str::to_owned).collect()
    }

    /// The cursor's row on the screen, from the top (0).
    fn cursor_row(&self) -> usize {
        self.text(&["display-message", "-p", "-t", "t", "#{cursor_y}"]).trim().parse().unwrap()
    }

    /// Whether the pane's command (leash) has ended.
    fn ended(&self) -> bool {
        self.text(&["display-message", "-p", "-t", "t", "#{pane_dead}"]).trim() == "1"
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// `leash run --ask` of `script` in a tmux pane, the scene's `get` defined.
fn in_tmux(scene: &Scene, args: &[&str], script: &str) -> Option<Tmux> {
    let mut argv = vec![LEASH.to_owned()];
    argv.extend(scene.leash_args(args));
    argv.extend(["sh".to_owned(), "-c".to_owned(), format!("{}\n{script}", Scene::prelude())]);
    Tmux::run(scene.dir.path(), &argv)
}

/// The SGR parameters set in `line` (captured with `-e`).
fn sgr_parameters(line: &str) -> Vec<String> {
    line.split("\x1b[")
        .skip(1)
        .filter_map(|s| s.split_once('m').map(|(params, _)| params))
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit() || b == b';'))
        .flat_map(|p| p.split(';').map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

#[test]
fn the_question_is_read_whole_on_the_cursors_line_whatever_state_the_command_left_the_terminal_in() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    // Labels of 50 characters: the name wraps over two lines, and without autowrap its registrable end is cut away.
    let host = format!("pypi.org.{}.{}.evil.test", "a".repeat(50), "b".repeat(50));
    let url = scene.url(&host, "/x");
    let fake = "\\033[7mleash:\\033[0m allow pypi.org:443 (GET /simple/)? [o]nce, [r]un, [a]lways, [d]eny > ";
    let script = format!(
        r#"printf '\033[1;3r\033[{ROWS};1H{fake}'
printf '\033[?6h\033[2;1H\033[?7l\033)0\016\033[8m\033[?25l\033[4h\033]0;'
get {url}"#
    );
    let Some(tmux) = in_tmux(&scene, &[], &script) else { return };
    let question = scene.question(&host, 1);
    let asked = format!("leash: allow {host}:{} (GET /x)?", scene.port);
    let shown = until("the question on the screen", || {
        let screen = tmux.screen(false);
        screen.iter().any(|l| l.contains(&asked)).then_some(screen)
    });
    // The question is the last line on the screen, and the cursor is on it (after it, where the answer goes).
    let last = shown.iter().rposition(|l| !l.trim().is_empty()).unwrap();
    assert!(
        shown[last].starts_with(&asked),
        "the last line is the question, host first and whole:\n{}",
        shown.join("\n")
    );
    let rows = tmux.text(&["capture-pane", "-p", "-t", "t"]);
    let last_row = rows.lines().collect::<Vec<_>>().iter().rposition(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(tmux.cursor_row(), last_row, "the cursor is on the question:\n{rows}");
    // Not concealed, in reverse video for the label only as leash draws it.
    let with_attributes = tmux.screen(true);
    let line = with_attributes.iter().rev().find(|l| l.contains("allow")).unwrap();
    assert!(!sgr_parameters(line).contains(&"8".to_owned()), "the question is concealed: {line:?}");
    scene.answer(&question, "deny", None);
    until("leash to end", || tmux.ended().then_some(()));
}

#[test]
fn the_command_cannot_write_the_operators_clipboard_through_the_terminal() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    // "pwned" to the clipboard by OSC 52, ended by BEL and by ST, and split across two writes; then a line to wait on.
    let script = r#"printf '\033]52;c;cHduZWQ=\007'; printf '\033]52;p;cHduZWQ=\033\\'
printf '\033]5'; sleep 0.2; printf '2;c;cHduZWQ=\007'; echo done-writing"#;
    let Some(tmux) = in_tmux(&scene, &[], script) else { return };
    until("the command to end", || tmux.ended().then_some(()));
    assert!(tmux.screen(false).iter().any(|l| l.contains("done-writing")), "{:?}", tmux.screen(false));
    let buffers = tmux.text(&["list-buffers"]);
    assert!(buffers.trim().is_empty(), "the command set the operator's clipboard: {buffers:?}");
}

#[test]
fn leashs_own_warnings_wait_while_a_question_is_up_then_follow_it() {
    if !sandbox_available() {
        return;
    }
    let scene = Scene::new("");
    // A question held open, then forty requests leash refuses (a port the policy does not list): a warning line each
    // on leash's stderr, which is the terminal the question is on.
    let script = format!(
        "get {} &\nsleep 0.3\nfor i in $(seq 40); do curl -s -o /dev/null http://ok.test:22/r$i; done\nwait",
        scene.url("new.test", "/x")
    );
    let Some(tmux) = in_tmux(&scene, &[], &script) else { return };
    let question = scene.question("new.test", 1);
    // Each warning is written before its audit line: all forty are, once the fortieth line is in the log.
    until("forty refusals", || {
        (scene.decisions().iter().filter(|l| l["reason"] == "port").count() == 40).then_some(())
    });
    let asked = format!("leash: allow new.test:{} (GET /x)?", scene.port);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        let screen = tmux.screen(false);
        let last = screen.iter().rposition(|l| !l.trim().is_empty()).unwrap();
        assert!(screen[last].starts_with(&asked), "the question is the last line:\n{}", screen.join("\n"));
        assert!(!screen.iter().any(|l| l.contains("refused GET")), "a warning while asking:\n{}", screen.join("\n"));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    scene.answer(&question, "once", None);
    until("leash to end", || tmux.ended().then_some(()));
    let screen = tmux.history();
    let (asked_at, warned_at) = (
        screen.iter().position(|l| l.starts_with(&asked)).unwrap(),
        screen
            .iter()
            .position(|l| l.contains("refused GET ok.test:22/r40 (port)"))
            .unwrap_or_else(|| panic!("{}", screen.join("\n"))),
    );
    assert!(asked_at < warned_at, "the warnings follow the question:\n{}", screen.join("\n"));
    // Each on a line of its own, from its start: no staircase on the raw terminal.
    assert!(
        screen[warned_at].trim_start().starts_with("WARN") || screen[warned_at].starts_with("refused"),
        "{:?}",
        screen[warned_at]
    );
}

#[test]
fn leash_proxy_at_its_own_terminal_holds_its_lines_at_a_question_and_stops_at_ctrl_c() {
    let scene = Scene::new("");
    let argv: Vec<String> = [LEASH, "proxy", "--policy", path(&scene.policy), "--ask-socket", path(&scene.socket)]
        .into_iter()
        .chain(["--listen", "127.0.0.1:0", "--log", path(&scene.log)])
        .map(str::to_owned)
        .collect();
    let Some(tmux) = Tmux::run(scene.dir.path(), &argv) else { return };
    let proxy = until("the proxy to listen", || {
        let screen = tmux.screen(false);
        screen.iter().find_map(|l| l.trim().strip_prefix("listening on ").map(|a| format!("http://{a}")))
    });
    let through = |url: String| {
        let proxy = proxy.clone();
        std::thread::spawn(move || {
            let args = ["-s", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", "-x", &proxy, &url];
            String::from_utf8_lossy(&Command::new("curl").args(args).output().unwrap().stdout).into_owned()
        })
    };
    let held = through(scene.url("new.test", "/x"));
    scene.question("new.test", 1);
    let asked = format!("leash: allow new.test:{} (GET /x)?", scene.port);
    until("the question", || tmux.screen(false).iter().any(|l| l.starts_with(&asked)).then_some(()));
    // Refusals while it is up: a warning line each, held.
    for i in 0..10 {
        assert_eq!(
            through(scene.url("ok.test", &format!("/r{i}")).replace(&format!(":{}", scene.port), ":22"))
                .join()
                .unwrap(),
            "403"
        );
    }
    let screen = tmux.screen(false);
    assert!(!screen.iter().any(|l| l.contains("refused GET")), "a warning while asking:\n{}", screen.join("\n"));
    // The operator's Ctrl-C at the question stops leash, as it would with no question up; the held request is
    // refused at once rather than after its timeout.
    assert!(tmux.cmd(&["send-keys", "-t", "t", "C-c"]).status.success());
    until("leash to stop", || tmux.ended().then_some(()));
    assert_eq!(held.join().unwrap(), "403");
    let history = tmux.history();
    let asked_at = history.iter().position(|l| l.starts_with(&asked)).unwrap();
    let warned_at = history.iter().position(|l| l.contains("refused GET ok.test:22/r9")).unwrap();
    assert!(asked_at < warned_at, "the warnings follow the question:\n{}", history.join("\n"));
}
