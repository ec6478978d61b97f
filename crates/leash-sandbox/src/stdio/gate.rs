//! The two relays of the command's pseudo-terminal, each with a gate leash can close for a question of its own
//! (`prompt.rs`): [`OutputGate`] copies the command's output to the caller's terminal one whole chunk at a time and
//! can be held between chunks; [`InputGate`] copies the caller's keystrokes to the command and can take them for
//! leash instead. Both work on any descriptors (the caller's terminal, or a test's pseudo-terminals and pipes).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::filter::OutputFilter;
use super::CHUNK;

/// The command's output on its way to the caller's terminal, and whether leash holds it.
#[derive(Debug)]
pub(super) struct OutputGate {
    state: Mutex<OutputState>,
    changed: Condvar,
    /// The caller's terminal.
    to: File,
}

#[derive(Debug, Default)]
struct OutputState {
    /// A prompt holds the output: the relay writes no chunk until it is released.
    held: bool,
    /// The relay is writing a chunk.
    writing: bool,
    /// The relay's source (a copy of its descriptor), to see whether output waits there to be relayed.
    source: Option<OwnedFd>,
    /// leash's own lines written while a prompt holds the output (`write_own`), to follow the prompt.
    own: Vec<u8>,
    /// How many bytes of leash's own lines did not fit in `own`.
    own_dropped: usize,
}

/// How much of leash's own output is kept while a question is up: its warnings are a line per refused request, and a
/// command can make many; beyond this they are counted, and the count said, rather than kept.
pub(super) const OWN_HELD_MAX: usize = 64 * 1024;

/// How long a prompt waits for the output the command wrote before it to be relayed first, so the question follows
/// it on the terminal; a command that keeps writing is held after this.
const DRAIN: Duration = Duration::from_millis(100);
/// How long a prompt waits for output on its way through the pseudo-terminal (written, not yet readable on its
/// master side: the kernel moves it in a work item of its own) before it takes no pending output for none.
const SETTLE: Duration = Duration::from_millis(5);

impl OutputGate {
    pub(super) fn new(to: File) -> OutputGate {
        OutputGate { state: Mutex::default(), changed: Condvar::new(), to }
    }

    /// Copies `from` (the pseudo-terminal's master) to the caller's terminal until end of file or an error on either
    /// side (`EIO` once no process holds the other side), one whole chunk at a time, through the filter that keeps
    /// what acts on the operator's machine from it (`filter.rs`).
    pub(super) fn relay(&self, mut from: File) {
        lock(&self.state).source = from.try_clone().ok().map(OwnedFd::from);
        let (mut buf, mut filter, mut passed) = (vec![0u8; CHUNK], OutputFilter::default(), Vec::with_capacity(CHUNK));
        loop {
            match from.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    passed.clear();
                    filter.feed(buf.get(..n).unwrap_or_default(), &mut passed);
                    if !passed.is_empty() && self.write_chunk(&passed).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Writes one chunk of the command's output once no prompt holds the output.
    fn write_chunk(&self, chunk: &[u8]) -> io::Result<()> {
        let mut state = wait_while(&self.changed, lock(&self.state), |s| s.held);
        state.writing = true;
        drop(state);
        let written = (&self.to).write_all(chunk);
        let mut state = lock(&self.state);
        state.writing = false;
        self.changed.notify_all();
        written
    }

    /// Holds the command's output once the chunk being written (if any) is out, until the hold is dropped: what the
    /// command writes meanwhile waits in its pseudo-terminal (and the command, once that is full).
    ///
    /// What the command wrote before the hold and the relay has not read yet is relayed first (for up to [`DRAIN`]),
    /// so the question comes after it on the terminal rather than in the middle of it.
    pub(super) fn hold(&self) -> OutputHold<'_> {
        let started = std::time::Instant::now();
        let mut state = wait_while(&self.changed, lock(&self.state), |s| s.held || s.writing);
        loop {
            let (pending, waited) = (state.source.as_ref().is_some_and(readable), started.elapsed());
            if waited >= DRAIN || (!pending && waited >= SETTLE) {
                break;
            }
            let tick = Duration::from_millis(1);
            let (next, _) = self.changed.wait_timeout(state, tick).unwrap_or_else(PoisonError::into_inner);
            state = wait_while(&self.changed, next, |s| s.held || s.writing);
        }
        state.held = true;
        OutputHold { gate: self }
    }
}

impl OutputGate {
    /// Writes leash's own `bytes` (its log and warnings, a line at a time) to the caller's terminal between the
    /// command's chunks; while a prompt holds the output they are kept (up to [`OWN_HELD_MAX`]) and written once it
    /// ends, so that no line of leash's lands in a question or scrolls it away. Line ends become `\r\n`: the
    /// terminal is raw while the command's is relayed.
    pub(super) fn write_own(&self, bytes: &[u8]) {
        let text = crlf(bytes);
        let mut state = wait_while(&self.changed, lock(&self.state), |s| s.writing);
        if state.held {
            if state.own.len() + text.len() <= OWN_HELD_MAX {
                state.own.extend_from_slice(&text);
            } else {
                state.own_dropped += text.len();
            }
            return;
        }
        state.writing = true;
        drop(state);
        // Nowhere to say that leash's own line could not be written.
        let _ = (&self.to).write_all(&text);
        lock(&self.state).writing = false;
        self.changed.notify_all();
    }
}

/// `bytes` with each line end that is a bare `\n` made `\r\n`.
fn crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 8);
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' && (i == 0 || bytes.get(i - 1) != Some(&b'\r')) {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

/// The caller's terminal while the command's output is held (`OutputGate::hold`): leash's alone.
#[derive(Debug)]
pub(super) struct OutputHold<'a> {
    gate: &'a OutputGate,
}

impl OutputHold<'_> {
    pub(super) fn write(&self, bytes: &[u8]) -> io::Result<()> {
        (&self.gate.to).write_all(bytes)
    }
}

impl Drop for OutputHold<'_> {
    /// Writes leash's own lines kept meanwhile (the prompt has ended its line), then lets the command's output go.
    fn drop(&mut self) {
        let mut state = lock(&self.gate.state);
        loop {
            let (mut own, dropped) = (std::mem::take(&mut state.own), std::mem::take(&mut state.own_dropped));
            if dropped > 0 {
                own.extend(
                    format!("leash: {dropped} bytes of leash's own messages dropped while a question was up\r\n")
                        .bytes(),
                );
            }
            if own.is_empty() {
                break;
            }
            // Still held: written outside the lock, and anything written meanwhile is taken on the next round.
            drop(state);
            let _ = (&self.gate.to).write_all(&own);
            state = lock(&self.gate.state);
        }
        state.held = false;
        drop(state);
        self.gate.changed.notify_all();
    }
}

/// The keys that signal the terminal's foreground process group: Ctrl-C, Ctrl-\\ and Ctrl-Z. They stay the
/// operator's while a question is up: each still goes on to the command (whose terminal signals its foreground
/// process group, or a raw-mode program reads it, as if no question were up) and ends the question. Otherwise a
/// command that kept a question up (one request after another, each to a new host) would have every Ctrl-C
/// typed at it taken as a dismissal.
pub(super) const SIGNAL_KEYS: [u8; 3] = [0x03, 0x1c, 0x1a];

/// The caller's keystrokes on their way to the command, and whether leash takes them instead.
#[derive(Debug)]
pub(super) struct InputGate {
    state: Mutex<InputState>,
    changed: Condvar,
    /// Wakes the relay (the write end of a pipe it polls) to start handing keystrokes to a prompt.
    wake: File,
}

#[derive(Debug, Default)]
struct InputState {
    /// A prompt wants the keystrokes.
    wanted: bool,
    /// The relay hands what it reads to the prompt (`typed`) instead of the command: set by the relay once it has
    /// passed on to the command what was typed before.
    taking: bool,
    typed: Vec<u8>,
    /// The relay has ended (the caller's terminal or the command's is gone), or the relay was finished.
    ended: bool,
}

impl InputGate {
    /// A gate, and the read end of its wake-up pipe for `relay`.
    pub(super) fn new() -> io::Result<(InputGate, File)> {
        let (read, write) = io::pipe()?;
        let gate =
            InputGate { state: Mutex::default(), changed: Condvar::new(), wake: File::from(OwnedFd::from(write)) };
        Ok((gate, File::from(OwnedFd::from(read))))
    }

    /// Copies `from` (the caller's terminal) to `to` (the pseudo-terminal's master) until end of file or an error on
    /// either side, except while a prompt takes the keystrokes. `wake` is the read end `new` gave.
    pub(super) fn relay(&self, mut from: File, mut to: File, mut wake: File) {
        let mut buf = vec![0u8; CHUNK];
        while let Ok(ready) = wait_readable(from.as_fd(), wake.as_fd()) {
            let passed = match ready {
                Ready::Wake => {
                    let _ = wake.read(&mut [0u8; 64]);
                    self.start_taking(&mut from, &mut to)
                }
                Ready::Input => match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => self.pass(buf.get(..n).unwrap_or_default(), &mut to),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
                    Err(e) => Err(e),
                },
            };
            if passed.is_err() {
                break;
            }
        }
        self.end();
    }

    /// Hands what was read to a prompt taking the keystrokes, or else to the command. A signal key goes to the
    /// command either way.
    fn pass(&self, bytes: &[u8], to: &mut File) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.taking {
            state.typed.extend_from_slice(bytes);
            self.changed.notify_all();
            drop(state);
            let signals: Vec<u8> = bytes.iter().copied().filter(|b| SIGNAL_KEYS.contains(b)).collect();
            return if signals.is_empty() { Ok(()) } else { to.write_all(&signals) };
        }
        drop(state);
        to.write_all(bytes)
    }

    /// For a prompt that wants the keystrokes: first passes on to the command what was typed before (already
    /// waiting in the caller's terminal), then takes the rest.
    fn start_taking(&self, from: &mut File, to: &mut File) -> io::Result<()> {
        let state = lock(&self.state);
        if !state.wanted || state.taking {
            return Ok(());
        }
        drop(state);
        let mut waiting = bytes_waiting(from.as_fd())?;
        let mut buf = vec![0u8; waiting.min(CHUNK)];
        while waiting > 0 {
            let n = from.read(buf.get_mut(..waiting.min(CHUNK)).unwrap_or_default())?;
            to.write_all(buf.get(..n).unwrap_or_default())?;
            waiting = if n == 0 { 0 } else { waiting.saturating_sub(n) };
        }
        let mut state = lock(&self.state);
        state.taking = state.wanted;
        self.changed.notify_all();
        Ok(())
    }

    /// Marks the relay ended, so that a prompt no longer waits for keystrokes.
    pub(super) fn end(&self) {
        lock(&self.state).ended = true;
        self.changed.notify_all();
    }

    pub(super) fn ended(&self) -> bool {
        lock(&self.state).ended
    }

    /// Takes the keystrokes typed from now on for a prompt, until the take is dropped: none reaches the command.
    pub(super) fn take(&self) -> InputTake<'_> {
        lock(&self.state).wanted = true;
        // A relay already gone has closed the pipe: `keys` then says the input ended.
        let _ = (&self.wake).write(b"w");
        InputTake { gate: self }
    }
}

/// The caller's keystrokes while a prompt takes them (`InputGate::take`).
#[derive(Debug)]
pub(super) struct InputTake<'a> {
    gate: &'a InputGate,
}

impl InputTake<'_> {
    /// Waits up to `wait` until the relay has passed on what was typed before the take and hands on the rest: at
    /// once, unless it is busy writing to a command that does not read its input. Whether it does.
    pub(super) fn started(&self, wait: Duration) -> bool {
        let state = lock(&self.gate.state);
        let (state, _) = self
            .gate
            .changed
            .wait_timeout_while(state, wait, |s| !s.taking && !s.ended)
            .unwrap_or_else(PoisonError::into_inner);
        state.taking
    }

    /// The keystrokes typed since the last call, waiting up to `wait` for some (none: an empty vector).
    pub(super) fn keys(&self, wait: Duration) -> io::Result<Vec<u8>> {
        let state = lock(&self.gate.state);
        let (mut state, _) = self
            .gate
            .changed
            .wait_timeout_while(state, wait, |s| s.typed.is_empty() && !s.ended)
            .unwrap_or_else(PoisonError::into_inner);
        if state.ended {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the terminal's input relay has ended"));
        }
        Ok(std::mem::take(&mut state.typed))
    }
}

impl Drop for InputTake<'_> {
    /// Gives the keystrokes back to the command; what was typed for the prompt but not read is dropped, as typed
    /// while the prompt was up.
    fn drop(&mut self) {
        let mut state = lock(&self.gate.state);
        state.wanted = false;
        state.taking = false;
        state.typed.clear();
    }
}

/// Which of the two descriptors `wait_readable` found readable.
enum Ready {
    Input,
    Wake,
}

/// Waits until `input` or `wake` can be read (or is closed, which a read then reports); `wake` first.
fn wait_readable(input: BorrowedFd<'_>, wake: BorrowedFd<'_>) -> io::Result<Ready> {
    let mut fds = [input, wake].map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
    loop {
        // SAFETY: `fds` is an array of two initialised pollfd, written only in `revents`.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } >= 0 {
            break;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    let ready = |fd: &libc::pollfd| fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    if ready(&fds[1]) {
        return Ok(Ready::Wake);
    }
    if ready(&fds[0]) || fds[0].revents & libc::POLLNVAL != 0 {
        return Ok(Ready::Input);
    }
    Err(io::Error::other("poll returned with nothing ready"))
}

/// How many bytes can be read from `fd` without waiting (`FIONREAD`: a terminal's or a pipe's input queue).
pub(super) fn bytes_waiting(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut count: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut count) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Whether `fd` has bytes to read now.
fn readable(fd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, not waited on (timeout 0).
    unsafe { libc::poll(&mut poll, 1, 0) > 0 && poll.revents & libc::POLLIN != 0 }
}

/// A lock that a panic elsewhere does not make unusable: the states here stay consistent at every step.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wait_while<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    until: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    changed.wait_while(guard, until).unwrap_or_else(PoisonError::into_inner)
}
