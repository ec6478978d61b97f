//! The control socket's protocol, one JSON object per line each way (docs/ask.md): what a client sends
//! ([`Request`]) and what leash writes back ([`Reply`], then for a watcher one [`Notice`] per event). The server
//! (`socket.rs`) and `leash ask` (src/cmd/ask.rs) both speak it through these types.

use leash_proxy::ask::{Event, Question};
use serde::{Deserialize, Serialize};

/// Longest request line leash reads; a longer one ends the connection.
pub const MAX_LINE: usize = 16 * 1024;

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// What is waiting for an answer now.
    List,
    /// Answer question `id`: `once`, `run`, `always` or `deny`; `scope` (`run`, `always`, `deny`) is the host itself
    /// when absent, or a `.domain` over it.
    Answer {
        /// The question's id.
        id: u64,
        /// The answer word.
        answer: String,
        /// The host or `.domain` a run-wide answer covers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
    /// The questions waiting now, then every event as it happens, until the client hangs up.
    Watch,
}

/// leash's reply to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was done.
    pub ok: bool,
    /// Why not, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The questions waiting (for `list` and `watch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<Question>>,
}

impl Reply {
    /// Done, with nothing to show.
    pub fn done() -> Reply {
        Reply { ok: true, error: None, pending: None }
    }

    /// Not done, and why.
    pub fn failed(why: impl Into<String>) -> Reply {
        Reply { ok: false, error: Some(why.into()), pending: None }
    }

    /// Done: the questions waiting.
    pub fn pending(pending: Vec<Question>) -> Reply {
        Reply { ok: true, error: None, pending: Some(pending) }
    }
}

/// One event, as a watcher gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Notice {
    /// A new question.
    Asked {
        /// What is asked.
        question: Question,
    },
    /// A question closed: answered, or timed out (`answer` and `by` are then `timeout`).
    Settled {
        /// The question's id.
        id: u64,
        /// `once`, `run`, `always`, `deny` or `timeout`.
        answer: String,
        /// `terminal`, `socket` or `timeout`.
        by: String,
    },
    /// Events were missed (the watcher read too slowly): list again.
    Missed,
}

impl From<Event> for Notice {
    fn from(event: Event) -> Notice {
        match event {
            Event::Asked(question) => Notice::Asked { question },
            Event::Settled { id, settlement } => {
                Notice::Settled { id, answer: settlement.answer_word().to_owned(), by: settlement.by_word().to_owned() }
            }
        }
    }
}

/// One line of JSON, newline-terminated.
pub fn line(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string(value).unwrap_or_else(|_| "{\"ok\":false}".to_owned());
    text.push('\n');
    text
}
