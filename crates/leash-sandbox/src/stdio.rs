//! The command's standard descriptors when they are sockets or a terminal: never handed over as they are.
//!
//! A socket belongs to the network namespace it was made in: one handed to leash as stdin, stdout or stderr
//! (systemd's `StandardOutput=socket`, inetd-style launchers, harnesses that wire stdio to sockets) is the host's, and
//! with it the command could `sendto` any host datagram socket by path or abstract name (`/dev/log`, journald) or,
//! for UDP, any address the host reaches, with no `connect` for init to see. `relay_stdio` puts a pipe in its place
//! and copies between the two from a thread of leash's, and `Sandbox::prepare` refuses a spec whose command would
//! still get one (`check_no_socket`).
//!
//! A terminal is the caller's: the command could switch its line discipline (`TIOCSETD`) or settings and leave the
//! caller's shell unable to use it. `relay_stdio` asks for a pseudo-terminal of the command's own instead
//! ([`Terminal`]), which the sandbox's init makes in the sandbox's own devpts instance (so `tty` names a file that
//! exists inside, and no host terminal is in sight) and hands leash its master side; [`StdioRelay::attach`] relays it
//! as `docker run -t` and `script` do (`terminal.rs`). Descriptors above 2 are never inherited (init closes them).
//!
//! The relay has a gate (`gate.rs`, `prompt.rs`) because leash sometimes has a question of its own for the person at
//! that terminal: in ask mode a request the policy would refuse is held while leash asks whether to let it through.
//! The command shares the terminal, and it is the party being asked about: it must not answer the question (type
//! into it), read the answer, or blur the question with output of its own (a fake prompt, or escape sequences in the
//! host name it asked for). [`StdioRelay::prompter`] gives a [`Prompter`] that holds the command's output between two
//! chunks, shows the question neutralised on a line of its own, takes the keystrokes meanwhile, and lets both relays
//! go on where they stopped. [`Prompter::direct`] asks the same way on a terminal of leash's own.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::{Sandbox, SandboxError, SandboxSpec};

use gate::{InputGate, OutputGate};
pub use prompt::Prompter;

mod filter;
mod gate;
mod prompt;
mod terminal;

/// What one read from either side carries at most: a pipe's default capacity, and a datagram leash sends whole.
const CHUNK: usize = 64 * 1024;

/// The pseudo-terminal the command gets in place of the caller's terminal (see [`relay_stdio`]): made by the
/// sandbox's init in the sandbox's own devpts instance, with the caller's settings and window size, as the command's
/// controlling terminal and the stdio it stands in for. Only [`relay_stdio`] makes one.
#[derive(Clone, Copy)]
pub struct Terminal {
    pub(crate) settings: libc::termios,
    pub(crate) size: libc::winsize,
    /// Which of stdin, stdout and stderr it is.
    pub(crate) stdio: [bool; 3],
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").field("stdio", &self.stdio).finish_non_exhaustive()
    }
}

/// Where [`OwnLines`] writes: the relay of the command's terminal, while that terminal is leash's stderr.
static OWN_OUTPUT: Mutex<Option<Arc<OutputGate>>> = Mutex::new(None);

/// leash's own output for stderr (its log and warnings: give it to the log's writer). Written to stderr at once, but
/// while the command's terminal is relayed to leash's stderr, through that relay: between the command's chunks, and
/// while a question is up, kept until it ends, so that no line of leash's lands in the question or scrolls it away
/// (a command can make leash warn at will, with refused requests). Each `write` should be whole lines.
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnLines;

impl Write for OwnLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let gate = OWN_OUTPUT.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match gate {
            Some(gate) => {
                gate.write_own(buf);
                Ok(buf.len())
            }
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Sends [`OwnLines`] through `gate` (`Some`), or straight to stderr again (`None`).
fn own_output(gate: Option<Arc<OutputGate>>) {
    *OWN_OUTPUT.lock().unwrap_or_else(PoisonError::into_inner) = gate;
}

/// The relays `relay_stdio` started, and the caller's terminal settings to put back.
#[derive(Debug, Default)]
pub struct StdioRelay {
    /// The output relays: they end when every process of the sandbox is gone (end of file, or `EIO` from a
    /// pseudo-terminal whose other side is closed everywhere).
    outputs: Vec<JoinHandle<()>>,
    /// The caller's terminal (stdin) as it was before it was made raw.
    terminal: Option<RawTerminal>,
    /// What leash's stdin, stdout and stderr are, for `attach`.
    kinds: Vec<Kind>,
    /// The gates of the terminal's relays, once `attach` started them.
    gates: Option<Gates>,
}

/// The gates of the terminal's relays (`gate.rs`), which a [`Prompter`] holds for a question.
#[derive(Debug)]
struct Gates {
    output: Arc<OutputGate>,
    /// Only where stdin is the terminal relayed.
    input: Option<Arc<InputGate>>,
}

impl StdioRelay {
    /// Relays the command's pseudo-terminal, if `relay_stdio` asked for one, to the caller's terminal: call it once
    /// the sandbox has started. Until then what the command writes waits in its terminal, and what the caller types
    /// in the caller's.
    pub fn attach(&mut self, sandbox: &mut Sandbox) -> io::Result<()> {
        match sandbox.take_terminal() {
            Some(master) => {
                self.gates = relay_terminal(master, &self.kinds, &mut self.outputs)?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Waits until everything the command wrote to a relayed stdout or stderr has been passed on, then puts the
    /// caller's terminal back as it was: call it once the sandbox has ended (before that, it waits for the end). A
    /// relayed stdin is left to end with the process.
    pub fn finish(mut self) {
        // A question still up would hold the output: it ends first, and leash's own lines go to stderr again.
        self.end_prompts();
        own_output(None);
        for relay in std::mem::take(&mut self.outputs) {
            let _ = relay.join();
        }
    }

    /// A [`Prompter`] for leash's own questions on the caller's terminal, between the command's output and in place
    /// of its input (see `prompt.rs`): once [`StdioRelay::attach`] relays the command's pseudo-terminal, where the
    /// caller's stdin is a terminal this relay reads, raw, in the foreground. `None` otherwise: a question then has
    /// to be asked some other way.
    pub fn prompter(&self) -> Option<Prompter> {
        self.terminal.as_ref()?;
        let gates = self.gates.as_ref()?;
        Some(Prompter::relayed(Arc::clone(&gates.output), Arc::clone(gates.input.as_ref()?)))
    }

    /// Ends any question up and refuses those to come: the terminal is about to be put back.
    fn end_prompts(&self) {
        if let Some(Gates { input: Some(input), .. }) = &self.gates {
            input.end();
        }
    }
}

impl Drop for StdioRelay {
    fn drop(&mut self) {
        self.end_prompts();
        if self.gates.is_some() {
            own_output(None);
        }
    }
}

/// Where `relay_stdio` found leash's stdio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Socket,
    Terminal,
    Other,
}

/// Makes leash's stdio safe to hand to the command, where `spec` has none of its own:
/// - a socket (belonging to the host's network namespace) is replaced by a pipe, and a thread copies between the
///   two (each chunk of output one `send`, so a datagram socket gets datagrams);
/// - a terminal (the caller's, which the command could reconfigure for the caller: line discipline, termios) is
///   replaced by a pseudo-terminal of its own, with the caller's settings and window size, which becomes the
///   command's controlling terminal (`SandboxSpec::terminal`): the caller's terminal (stdin) is made raw here, and
///   once [`StdioRelay::attach`] has the pseudo-terminal it is relayed both ways, window size changes follow
///   (SIGWINCH), and [`StdioRelay::finish`] (or dropping the relay) puts its settings back. Ctrl-C and Ctrl-Z are then
///   the pseudo-terminal's, for the command's foreground process group.
///
/// The threads block every signal, so signals sent to leash still reach the thread that waits for them. Anything
/// else is left alone, and nothing is started: one `fstat` per descriptor.
pub fn relay_stdio(spec: &mut SandboxSpec) -> io::Result<StdioRelay> {
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let fds = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    let own = [spec.stdin.is_some(), spec.stdout.is_some(), spec.stderr.is_some()];
    let kinds: Vec<Kind> = fds.iter().zip(own).map(|(fd, own)| if own { Kind::Other } else { kind(*fd) }).collect();
    let mut relay = StdioRelay::default();
    if kinds.contains(&Kind::Terminal) {
        relay.terminal = ask_for_terminal(spec, &kinds)?;
    }
    if kinds.first() == Some(&Kind::Socket) {
        let (read, write) = io::pipe()?;
        let socket = File::from(stdin.as_fd().try_clone_to_owned()?);
        spawn_quiet(move || copy(socket, File::from(OwnedFd::from(write))))?;
        spec.stdin = Some(OwnedFd::from(read));
    }
    for (i, slot) in [(1, &mut spec.stdout), (2, &mut spec.stderr)] {
        if kinds.get(i) == Some(&Kind::Socket) {
            let (read, write) = io::pipe()?;
            let socket = File::from(fds[i].try_clone_to_owned()?);
            relay.outputs.push(spawn_quiet(move || copy(File::from(OwnedFd::from(read)), socket))?);
            *slot = Some(OwnedFd::from(write));
        }
    }
    relay.kinds = kinds;
    Ok(relay)
}

/// Asks for a pseudo-terminal for the command in place of the caller's terminal, like the first of leash's stdio that
/// is one, and makes the caller's terminal (stdin) raw (see `relay_stdio`).
fn ask_for_terminal(spec: &mut SandboxSpec, kinds: &[Kind]) -> io::Result<Option<RawTerminal>> {
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let fds = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    let Some(first) = kinds.iter().position(|k| *k == Kind::Terminal) else { return Ok(None) };
    let caller = fds[first];
    let stdio = [0, 1, 2].map(|i| kinds.get(i) == Some(&Kind::Terminal));
    spec.terminal =
        Some(Terminal { settings: terminal::settings(caller)?, size: terminal::window_size(caller)?, stdio });
    // A background job may not change the terminal (SIGTTOU would stop leash): it relays without raw mode.
    if kinds.first() == Some(&Kind::Terminal) && terminal::in_foreground(stdin.as_fd()) {
        return RawTerminal::make(stdin.as_fd()).map(Some);
    }
    Ok(None)
}

/// Relays the command's pseudo-terminal (`master`) to the caller's terminal, through gates a prompt can hold.
fn relay_terminal(master: OwnedFd, kinds: &[Kind], outputs: &mut Vec<JoinHandle<()>>) -> io::Result<Option<Gates>> {
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let fds = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    let Some(first) = kinds.iter().position(|k| *k == Kind::Terminal) else { return Ok(None) };
    let caller = fds[first];
    // Output: to the caller's terminal, through stdout where it is one.
    let out = if kinds.get(1) == Some(&Kind::Terminal) { fds[1] } else { caller };
    let output = Arc::new(OutputGate::new(File::from(out.try_clone_to_owned()?)));
    if kinds.get(2) == Some(&Kind::Terminal) && same_file(fds[2], out) {
        own_output(Some(Arc::clone(&output)));
    }
    let from = File::from(master.try_clone()?);
    let relay = Arc::clone(&output);
    // The pseudo-terminal reads `EIO` once no process holds its other side: the end of the output.
    outputs.push(spawn_quiet(move || relay.relay(from))?);
    terminal::follow_window_size(caller.try_clone_to_owned()?, master.try_clone()?)?;
    if kinds.first() != Some(&Kind::Terminal) {
        return Ok(Some(Gates { output, input: None }));
    }
    let (input, wake) = InputGate::new()?;
    let (input, relay) = (Arc::new(input), File::from(stdin.as_fd().try_clone_to_owned()?));
    let gate = Arc::clone(&input);
    spawn_quiet(move || gate.relay(relay, File::from(master), wake))?;
    Ok(Some(Gates { output, input: Some(input) }))
}

/// The caller's terminal, raw until dropped, when its settings are put back.
#[derive(Debug)]
struct RawTerminal {
    fd: OwnedFd,
    saved: libc::termios,
}

impl RawTerminal {
    fn make(fd: BorrowedFd<'_>) -> io::Result<RawTerminal> {
        let fd = fd.try_clone_to_owned()?;
        let saved = terminal::settings(fd.as_fd())?;
        terminal::make_raw(fd.as_fd(), saved)?;
        Ok(RawTerminal { fd, saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = terminal::set(self.fd.as_fd(), &self.saved);
    }
}

/// Refuses a command whose stdin, stdout or stderr would be a socket (see the module docs).
pub(crate) fn check_no_socket(spec: &SandboxSpec) -> Result<(), SandboxError> {
    let own = [spec.stdin.as_ref(), spec.stdout.as_ref(), spec.stderr.as_ref()];
    let (stdin, stdout, stderr) = (io::stdin(), io::stdout(), io::stderr());
    let inherited = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    for ((name, own), inherited) in ["stdin", "stdout", "stderr"].into_iter().zip(own).zip(inherited) {
        if is_socket(own.map_or(inherited, AsFd::as_fd)) {
            return Err(SandboxError::InvalidSpec(format!(
                "the command's {name} would be a socket of the host's network namespace: relay it through a pipe \
                 (`relay_stdio`)"
            )));
        }
    }
    Ok(())
}

/// Whether two descriptors are the same file (device and inode): leash's stderr and the terminal it relays to.
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev),
        _ => false,
    }
}

/// Whether `fd` is a socket; a closed descriptor is not.
fn is_socket(fd: BorrowedFd<'_>) -> bool {
    kind(fd) == Kind::Socket
}

/// A socket, a terminal, or anything else (a closed descriptor among them).
fn kind(fd: BorrowedFd<'_>) -> Kind {
    use rustix::fs::FileType;
    match rustix::fs::fstat(fd).map(|st| FileType::from_raw_mode(st.st_mode)) {
        Ok(FileType::Socket) => Kind::Socket,
        // SAFETY: isatty only queries the open descriptor.
        Ok(FileType::CharacterDevice) if unsafe { libc::isatty(fd.as_raw_fd()) } == 1 => Kind::Terminal,
        _ => Kind::Other,
    }
}

/// Copies until end of file or an error on either side (a reader gone, a socket closed): each chunk read is one
/// write.
fn copy(mut from: File, mut to: File) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(buf.get(..n).unwrap_or_default()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A thread with every signal blocked.
pub(crate) fn spawn_quiet(work: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    // SAFETY: sigset_t is plain data, filled by sigfillset; pthread_sigmask only reads `all` and writes `old`.
    let (all, mut old) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        (all, std::mem::zeroed::<libc::sigset_t>())
    };
    // SAFETY: both sets are initialised; the new thread inherits the mask, which is then put back here.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) };
    let spawned = std::thread::Builder::new().name("leash-stdio".into()).spawn(work);
    // SAFETY: `old` was filled by the call above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned
}
