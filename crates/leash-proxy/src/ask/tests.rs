use std::sync::Arc;
use std::time::Duration;

use super::*;

fn asking(timeout: Duration) -> Arc<Asking> {
    Arc::new(Asking::new(timeout, Arc::default()))
}

fn held(host: &str) -> Held<'_> {
    Held { kind: HeldKind::Request, method: "GET", host, port: 80, path: Some("/x?q=1") }
}

/// Hold a request to `host` in a task of its own.
fn hold(asking: &Arc<Asking>, host: &'static str) -> tokio::task::JoinHandle<Ruling> {
    let asking = asking.clone();
    tokio::spawn(async move { asking.hold(held(host)).await })
}

/// Wait (bounded) until `n` requests wait on the question about `host`; its id.
async fn asked(asking: &Asking, host: &str, n: usize) -> u64 {
    for _ in 0..500 {
        if let Some(q) = asking.pending().into_iter().find(|q| q.host == host && q.waiting == n) {
            return q.id;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no question about {host} with {n} waiting: {:?}", asking.pending());
}

#[tokio::test]
async fn requests_for_one_host_share_one_question_and_once_lets_exactly_them_through() {
    let asking = asking(Duration::from_secs(20));
    let mut events = asking.watch();
    let (a, b) = (hold(&asking, "new.example"), hold(&asking, "new.example"));
    let id = asked(&asking, "new.example", 2).await;
    assert_eq!(asking.pending().len(), 1);
    let Ok(Event::Asked(q)) = events.recv().await else { panic!("no question event") };
    assert_eq!((q.id, q.method.as_str(), q.path.as_deref()), (id, "GET", Some("/x?q=1")));
    asking.answer(id, Answer::Once, None, AnsweredBy::Terminal).unwrap();
    for ruling in [a.await.unwrap(), b.await.unwrap()] {
        assert!(ruling.settlement.allows());
        assert_eq!((ruling.settlement.answer_word(), ruling.settlement.by_word()), ("once", "terminal"));
    }
    assert!(matches!(events.recv().await, Ok(Event::Settled { id: i, .. }) if i == id));
    // `once` is not for the run: the next request is asked again.
    let again = hold(&asking, "new.example");
    let id2 = asked(&asking, "new.example", 1).await;
    assert_ne!(id, id2);
    asking.answer(id2, Answer::Deny, None, AnsweredBy::Socket).unwrap();
    assert!(!again.await.unwrap().settlement.allows());
}

#[tokio::test]
async fn a_run_wide_answer_for_a_domain_settles_its_open_questions_and_later_requests_at_once() {
    let asking = asking(Duration::from_secs(20));
    let (a, b, other) = (hold(&asking, "a.example"), hold(&asking, "b.a.example"), hold(&asking, "other.test"));
    let id = asked(&asking, "a.example", 1).await;
    asked(&asking, "b.a.example", 1).await;
    asked(&asking, "other.test", 1).await;
    let wrong = asking.answer(id, Answer::Run, Some(".other.test"), AnsweredBy::Socket);
    assert!(matches!(wrong, Err(AnswerError::ScopeDoesNotCover { .. })), "{wrong:?}");
    asking.answer(id, Answer::Run, Some(".a.example"), AnsweredBy::Socket).unwrap();
    assert!(a.await.unwrap().settlement.allows());
    assert!(b.await.unwrap().settlement.allows());
    // Not covered: still open.
    assert_eq!(asking.pending().iter().map(|q| q.host.as_str()).collect::<Vec<_>>(), ["other.test"]);
    let later = asking.hold(held("c.b.a.example")).await;
    assert_eq!((later.settlement.answer_word(), later.waited), ("run", Duration::ZERO));
    assert_eq!(asking.approved(), [(".a.example".to_owned(), Answer::Run)]);
    other.abort();
}

#[tokio::test]
async fn a_denied_host_is_refused_for_the_run_without_asking_again() {
    let asking = asking(Duration::from_secs(20));
    let first = hold(&asking, "evil.test");
    let id = asked(&asking, "evil.test", 1).await;
    asking.answer(id, Answer::Deny, None, AnsweredBy::Terminal).unwrap();
    assert_eq!(first.await.unwrap().settlement.answer_word(), "deny");
    let mut events = asking.watch();
    for _ in 0..100 {
        let ruling = asking.hold(held("evil.test")).await;
        assert_eq!((ruling.settlement.answer_word(), ruling.settlement.by_word()), ("deny", "terminal"));
    }
    assert!(asking.pending().is_empty());
    assert!(events.try_recv().is_err(), "asked again");
    assert!(asking.approved().is_empty());
}

#[tokio::test]
async fn a_question_nobody_answers_times_out_for_every_waiter_and_stays_refused() {
    let asking = asking(Duration::from_millis(300));
    let (a, b) = (hold(&asking, "slow.test"), hold(&asking, "slow.test"));
    let id = asked(&asking, "slow.test", 2).await;
    for ruling in [a.await.unwrap(), b.await.unwrap()] {
        assert_eq!((ruling.settlement.answer_word(), ruling.settlement.by_word()), ("timeout", "timeout"));
        assert!(ruling.waited >= Duration::from_millis(250), "{:?}", ruling.waited);
    }
    assert!(asking.pending().is_empty());
    assert_eq!(asking.answer(id, Answer::Run, None, AnsweredBy::Socket), Err(AnswerError::NoSuchQuestion(id)));
    let later = asking.hold(held("slow.test")).await;
    assert_eq!((later.settlement.answer_word(), later.waited), ("timeout", Duration::ZERO));
}

#[test]
fn a_scope_covers_its_host_and_a_dot_domain_its_name_and_names_under_it() {
    assert!(covers("a.example", "a.example"));
    assert!(!covers("a.example", "b.a.example"));
    assert!(covers(".a.example", "a.example"));
    assert!(covers(".a.example", "x.y.a.example"));
    assert!(!covers(".a.example", "xa.example"));
    assert!(!covers(".example", "example.test"));
}

#[tokio::test]
async fn the_newest_run_wide_answer_covering_a_host_decides_it() {
    let asking = asking(Duration::from_secs(20));
    let first = hold(&asking, "a.x.test");
    let id = asked(&asking, "a.x.test", 1).await;
    asking.answer(id, Answer::Deny, Some(".x.test"), AnsweredBy::Socket).unwrap();
    assert!(!first.await.unwrap().settlement.allows());
    // A later, narrower `run` for one name under the denied domain wins for that name only.
    let mut events = asking.watch();
    let again = hold(&asking, "b.x.test");
    assert!(!again.await.unwrap().settlement.allows(), "asked again about a denied domain");
    assert!(events.try_recv().is_err());
    let c = hold(&asking, "c.y.test");
    let id = asked(&asking, "c.y.test", 1).await;
    asking.answer(id, Answer::Run, Some(".y.test"), AnsweredBy::Socket).unwrap();
    assert!(c.await.unwrap().settlement.allows());
    let d = hold(&asking, "d.y.test");
    assert!(d.await.unwrap().settlement.allows());
}
