//! The prompt gate: leash's own questions ("allow GET http://x.example/y?") on the caller's terminal, asked while a
//! command runs on a pseudo-terminal relayed to it (`StdioRelay::prompter`) or in a terminal of leash's alone
//! ([`Prompter::direct`]).
//!
//! The question must be the person's and leash's only. While it is up, the command's output is held (`gate.rs`: the
//! chunk being written is finished first, so no command byte lands inside the question's line), and every keystroke
//! goes to leash: the command neither sees the answer nor can type one. The question names hosts and paths the
//! command chose, so it is shown with every control character escaped: no escape sequence of the command's reaches the
//! terminal through it. Nor does any state the command left the terminal in: before the question is drawn, every
//! setting that changes what the person reads is put back ([`RESET`]), and the question goes on a fresh line at the
//! bottom of the screen. The prompt line is ended with a newline, not erased: the question and the answer typed stay
//! in the scrollback, for the person to see later what was allowed.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::gate::{InputGate, OutputGate, SIGNAL_KEYS};
use super::{kind, terminal, Kind, RawTerminal};

/// How often `still_open` is asked while nobody types: well under the 100 ms a withdrawn question may stay up.
const STILL_OPEN_EVERY: Duration = Duration::from_millis(50);

/// How long a question waits for the input relay to start taking keystrokes before it shows anyway: the relay starts
/// at once unless it is blocked writing to a command that does not read its input (then keys wait until it does).
const TAKE_WAIT: Duration = Duration::from_millis(200);

/// What marks the line as leash's: `leash:` in bold reverse video, which no output of the command is let into.
const LABEL: &str = "\x1b[1;7mleash:\x1b[0m ";

/// What the question is drawn after on a terminal the command shares: the terminal put back to a state the command
/// did not choose, and the cursor on a fresh line at the bottom. The command writes what it likes between questions
/// (a scroll region holding a fake question still, autowrap off to cut a long host name short, concealed text, a
/// line-drawing character set, a string left open to swallow the question); each piece of state that changes what
/// the person reads is set here, explicitly, since terminals differ in what a soft reset covers.
///
/// The command's full-screen picture may need redrawing afterwards (Ctrl-L): its settings are not restored. The
/// alternate screen is left as it is: the question is drawn where the person is looking, and switching screens
/// would show a screen the command also wrote and break its display; the one cost is that a question asked while a
/// full-screen program runs is not kept in the scrollback.
pub(super) const RESET: &str = concat!(
    // CAN ends any escape sequence the command left open; ST ends any string (an open OSC title would take in
    // everything up to its end: the whole question).
    "\x18\x1b\\",
    // DECSTR, the soft reset: cursor shown, insert and origin modes off, scroll margins the whole screen, character
    // sets ASCII, SGR normal, cursor keys normal. Then each of those again, and what it leaves out, for a terminal
    // that lacks it or does less: autowrap on (DECSTR turns it off), scroll region and left/right margins reset,
    // origin and insert modes off, G0-G3 ASCII with G0 shifted in, attributes off (no conceal, no colours).
    "\x1b[!p\x1b[?7h\x1b[r\x1b[?69l\x1b[?6l\x1b[4l\x1b(B\x1b)B\x1b*B\x1b+B\x0f\x1b[0m\x1b[?25h",
    // The colours themselves: a palette and default colours the command set could draw text in the background's.
    "\x1b]104\x1b\\\x1b]110\x1b\\\x1b]111\x1b\\",
    // Keys and mouse as the prompt reads them: no mouse reports (X10's raw bytes would type into the answer), no
    // modifyOtherKeys or kitty keyboard flags (Ctrl-C and Enter would come as sequences the prompt skips).
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[>4m\x1b[=0;1u",
    // The bottom line (row 999 is clamped to the last), then a new one scrolled in under it and cleared.
    "\x1b[999;1H\r\n\x1b[2K",
);

/// At most this many characters of a question are shown: a path can be kilobytes long, the question one line or two.
const QUESTION_MAX: usize = 400;

/// At most this many characters of an answer are kept: answers are a word.
const ANSWER_MAX: usize = 64;

/// What ends the line of a question withdrawn (answered elsewhere, or timed out) while it was up.
const WITHDRAWN: &[u8] = b" (no longer asked)\r\n";

/// Asks the person at the terminal a question, one at a time, without the command in between (see the module docs).
/// Cheap to clone: clones share the terminal and take turns.
#[derive(Clone, Debug)]
pub struct Prompter {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    terminal: Console,
    /// One question at a time: the others wait their turn.
    asking: Mutex<()>,
}

/// Where the questions go and the answers come from.
#[derive(Debug)]
enum Console {
    /// The caller's terminal while it relays a command's pseudo-terminal.
    Relayed { output: Arc<OutputGate>, input: Arc<InputGate> },
    /// A terminal nothing else reads: `input` is made raw while a question is up, `output` shows it (through a gate
    /// that holds leash's own lines meanwhile; no command's output goes there).
    Direct { input: OwnedFd, output: Arc<OutputGate> },
}

impl Prompter {
    /// A prompter for a leash with a terminal of its own and no command on it (`leash proxy --ask` run in one): where
    /// stdin is a terminal leash is not a background job of, and stderr (or else stdout) is one. The terminal is raw only
    /// while a question is up. leash's own lines ([`super::OwnLines`]) wait meanwhile when they go to that terminal.
    pub fn direct() -> Option<Prompter> {
        let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
        if kind(stdin.as_fd()) != Kind::Terminal || terminal::in_background(stdin.as_fd()) {
            return None;
        }
        let output = [stderr.as_fd(), stdout.as_fd()].into_iter().find(|fd| kind(*fd) == Kind::Terminal)?;
        let input = stdin.as_fd().try_clone_to_owned().ok()?;
        let gate = Arc::new(OutputGate::new(File::from(output.try_clone_to_owned().ok()?)));
        if super::same_file(stderr.as_fd(), output) {
            super::own_output(Some(Arc::clone(&gate)));
        }
        Some(Prompter::with(Console::Direct { input, output: gate }))
    }

    pub(super) fn relayed(output: Arc<OutputGate>, input: Arc<InputGate>) -> Prompter {
        Prompter::with(Console::Relayed { output, input })
    }

    fn with(terminal: Console) -> Prompter {
        Prompter { shared: Arc::new(Shared { terminal, asking: Mutex::new(()) }) }
    }

    /// Shows `question` on a line of its own (control characters escaped) and reads a line typed in answer, echoed
    /// and editable (backspace, Ctrl-U). Returns it at Enter; `None` at Esc or a signal key, or once `still_open`
    /// (asked at least every 100 ms) says the question is no longer asked. The line is then ended with a newline, and
    /// the command's output and input go on where they stopped: nothing typed while the question was up reaches the
    /// command but a signal key (Ctrl-C, Ctrl-\\, Ctrl-Z), which goes on to the command (on a terminal of leash's
    /// own, signals leash's process group) as if no question were up. Blocks (waiting its turn behind another question
    /// first); an error means the terminal is gone.
    pub fn ask(&self, question: &str, still_open: &dyn Fn() -> bool) -> io::Result<Option<String>> {
        let _turn = self.shared.asking.lock().unwrap_or_else(PoisonError::into_inner);
        match &self.shared.terminal {
            Console::Relayed { output, input } => ask_relayed(output, input, question, still_open),
            Console::Direct { input, output } => ask_direct(input.as_fd(), output, question, still_open),
        }
    }
}

/// Asks over the relay: holds the command's output, shows the question, then takes the keystrokes.
fn ask_relayed(
    output: &OutputGate,
    input: &InputGate,
    question: &str,
    still_open: &dyn Fn() -> bool,
) -> io::Result<Option<String>> {
    if input.ended() {
        return Err(input_ended());
    }
    let hold = output.hold();
    // What was typed before the question shows was meant for the command, and goes there; what is typed once it
    // shows is the answer's. A relay busy writing to a command that does not read gets the keys later.
    let take = input.take();
    take.started(TAKE_WAIT);
    hold.write(question_line(RESET, question).as_bytes())?;
    // A signal key has already gone on to the command (`InputGate`): it only ends the question here.
    Ok(converse(|bytes| hold.write(bytes), |wait| take.keys(wait), still_open)?.answer())
}

/// Asks on a terminal of leash's own: raw while the question is up, and what was typed before it is dropped.
fn ask_direct(
    input: BorrowedFd<'_>,
    output: &OutputGate,
    question: &str,
    still_open: &dyn Fn() -> bool,
) -> io::Result<Option<String>> {
    // A background job changing the terminal would be stopped (SIGTTOU).
    if terminal::in_background(input) {
        return Err(io::Error::other("leash is not in its terminal's foreground"));
    }
    let ended = {
        // Dropped in reverse: the terminal is put back, then leash's lines kept meanwhile are written.
        let hold = output.hold();
        let _raw = RawTerminal::make(input)?;
        // SAFETY: tcflush takes no pointers. Nothing else reads this terminal: what waits there was typed before the
        // question, and must not answer it.
        unsafe { libc::tcflush(input.as_raw_fd(), libc::TCIFLUSH) };
        hold.write(question_line("\r\n", question).as_bytes())?;
        converse(|bytes| hold.write(bytes), |wait| read_keys(input, wait), still_open)?
    };
    if let Ended::Signal(key) = ended {
        signal_foreground(input, key);
    }
    Ok(ended.answer())
}

/// Does what the terminal would have done with a signal key typed while it was raw for a question: signals its
/// foreground process group (leash's) — SIGINT for Ctrl-C, SIGQUIT for Ctrl-\\, SIGTSTP for Ctrl-Z. Nothing for a
/// terminal that is not leash's controlling one.
fn signal_foreground(terminal: BorrowedFd<'_>, key: u8) {
    let signal = match key {
        CTRL_C => libc::SIGINT,
        CTRL_BACKSLASH => libc::SIGQUIT,
        _ => libc::SIGTSTP,
    };
    // SAFETY: tcgetpgrp and kill take no pointers; tcgetpgrp fails (-1) for a terminal that is not ours.
    unsafe {
        let group = libc::tcgetpgrp(terminal.as_raw_fd());
        if group > 0 {
            libc::kill(-group, signal);
        }
    }
}

/// The question's line: `lead`, the label, the question neutralised, and a space before the answer.
fn question_line(lead: &str, question: &str) -> String {
    format!("{lead}{LABEL}{} ", neutralise(question))
}

/// `question` with every character but printable ASCII shown as its `\u{..}` escape (ESC as `\u{1b}`): it names a
/// host and a path the command chose, which must not reach the terminal as control sequences.
fn neutralise(question: &str) -> String {
    let mut shown = String::with_capacity(question.len());
    for c in question.chars().take(QUESTION_MAX) {
        if c == ' ' || c.is_ascii_graphic() {
            shown.push(c);
        } else {
            shown.extend(c.escape_unicode());
        }
    }
    if question.chars().nth(QUESTION_MAX).is_some() {
        shown.push_str("...");
    }
    shown
}

/// How a question on the terminal ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// A line was entered.
    Answer(String),
    /// Esc, or the question is no longer asked.
    Closed,
    /// A signal key: Ctrl-C, Ctrl-\\ or Ctrl-Z, the operator's for the foreground (the command's, or leash's).
    Signal(u8),
}

impl Ended {
    fn answer(self) -> Option<String> {
        match self {
            Ended::Answer(line) => Some(line),
            Ended::Closed | Ended::Signal(_) => None,
        }
    }
}

/// Reads and echoes keystrokes until a line is entered, dismissed, or no longer asked for, then ends the line.
fn converse(
    show: impl Fn(&[u8]) -> io::Result<()>,
    keys: impl Fn(Duration) -> io::Result<Vec<u8>>,
    still_open: &dyn Fn() -> bool,
) -> io::Result<Ended> {
    let mut editor = LineEditor::default();
    let (answer, ending): (_, &[u8]) = loop {
        if !still_open() {
            break (Ended::Closed, WITHDRAWN);
        }
        let typed = keys(STILL_OPEN_EVERY).inspect_err(|_| {
            let _ = show(b"\r\n");
        })?;
        let mut echo = Vec::new();
        let step = editor.feed(&typed, &mut echo);
        show(&echo)?;
        match step {
            Step::Typing => {}
            Step::Entered(line) => break (Ended::Answer(line), b"\r\n"),
            Step::Dismissed => break (Ended::Closed, b"\r\n"),
            Step::Signal(key) => break (Ended::Signal(key), b"\r\n"),
        }
    };
    show(ending)?;
    Ok(answer)
}

/// Keystrokes from a terminal of leash's own, waiting up to `wait` for some.
fn read_keys(input: BorrowedFd<'_>, wait: Duration) -> io::Result<Vec<u8>> {
    let mut fd = libc::pollfd { fd: input.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let millis = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one initialised pollfd, written only in `revents`.
    match unsafe { libc::poll(&mut fd, 1, millis) } {
        0 => return Ok(Vec::new()),
        n if n < 0 => {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(error) };
        }
        _ => {}
    }
    let mut keys = vec![0u8; 256];
    let n = File::from(input.try_clone_to_owned()?).read(&mut keys)?;
    if n == 0 {
        return Err(input_ended());
    }
    keys.truncate(n);
    Ok(keys)
}

fn input_ended() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the terminal's input has ended")
}

/// A line being typed in answer, as a raw terminal sends it.
#[derive(Debug, Default)]
struct LineEditor {
    line: String,
    escape: Escape,
}

/// Where the editor is in an escape sequence a key sent (an arrow: `ESC [ A`), which it skips.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Escape {
    #[default]
    Outside,
    /// After `ESC [`: up to a final byte, `@` to `~`.
    Csi,
    /// After `ESC O`: one more byte.
    Ss3,
    /// A string a terminal sends in reply to a query the command made (`ESC ]`, `ESC P`, `ESC _`, `ESC ^`, `ESC X`):
    /// up to BEL or `ESC \\`, skipped, so that no reply dismisses or types into the answer.
    String,
    /// The `ESC` in such a string.
    StringEsc,
}

#[derive(Debug, PartialEq)]
enum Step {
    Typing,
    Entered(String),
    Dismissed,
    /// A signal key (see [`SIGNAL_KEYS`]).
    Signal(u8),
}

const CTRL_C: u8 = 0x03;
const CTRL_BACKSLASH: u8 = 0x1c;
const BACKSPACE: u8 = 0x08;
const CTRL_U: u8 = 0x15;
const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const DELETE: u8 = 0x7f;
/// What a terminal shows to take back one character: back, blank it, back.
const RUB_OUT: &[u8] = b"\x08 \x08";

impl LineEditor {
    /// Takes what was typed, adding to `echo` what the terminal should show. A signal key ends the question wherever
    /// it comes. Esc alone dismisses; Esc followed, in the same read, by `[` or `O` starts a key's sequence, and by
    /// `]`, `P`, `_`, `^` or `X` a terminal's reply string, which are skipped. Other control keys and non-ASCII are
    /// ignored.
    fn feed(&mut self, keys: &[u8], echo: &mut Vec<u8>) -> Step {
        let mut keys = keys.iter().copied();
        while let Some(key) = keys.next() {
            if SIGNAL_KEYS.contains(&key) {
                return Step::Signal(key);
            }
            match (self.escape, key) {
                (Escape::Csi, 0x40..=0x7e) | (Escape::Ss3, _) => self.escape = Escape::Outside,
                (Escape::Csi, _) => {}
                (Escape::String, BEL) | (Escape::StringEsc, b'\\') => self.escape = Escape::Outside,
                (Escape::String | Escape::StringEsc, ESC) => self.escape = Escape::StringEsc,
                (Escape::String | Escape::StringEsc, _) => self.escape = Escape::String,
                (Escape::Outside, ESC) => match keys.next() {
                    Some(b'[') => self.escape = Escape::Csi,
                    Some(b'O') => self.escape = Escape::Ss3,
                    Some(b']' | b'P' | b'_' | b'^' | b'X') => self.escape = Escape::String,
                    _ => return Step::Dismissed,
                },
                (Escape::Outside, b'\r' | b'\n') => return Step::Entered(std::mem::take(&mut self.line)),
                (Escape::Outside, BACKSPACE | DELETE) if self.line.pop().is_some() => echo.extend_from_slice(RUB_OUT),
                (Escape::Outside, CTRL_U) => {
                    echo.extend(RUB_OUT.repeat(self.line.len()));
                    self.line.clear();
                }
                (Escape::Outside, b' '..=b'~') if self.line.len() < ANSWER_MAX => {
                    self.line.push(char::from(key));
                    echo.push(key);
                }
                _ => {}
            }
        }
        Step::Typing
    }
}

#[cfg(test)]
mod tests;
