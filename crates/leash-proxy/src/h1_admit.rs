//! An HTTP/1.1 request (plain, or inside an inspected tunnel) handed to the admission sequence (`admit.rs`) with its
//! body still on the client's connection, and what goes up once it is admitted: the head with the credential in, the
//! target with a credential's query, a body the gate read.

use std::borrow::Cow;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::admit::{admit, Admitted, BodyLeft, Door, Entry};
use crate::conn::{BufConn, Next};
use crate::gate::RequestCtx;
use crate::model::H1Body;
use crate::refusal::reply;
use crate::request::{buffered_request, request_head_bytes, Plan, TargetForm};
use crate::wire::http_head::{BodyFraming, RequestHead};
use crate::wire::target::split_query;

/// An HTTP/1.1 request (plain, or inside an inspected tunnel) admitted, as it goes up.
pub(crate) struct Sending<'h, U> {
    /// The head as it goes up (the credential put in).
    pub head: Cow<'h, RequestHead>,
    /// The bytes sent first: the head (and a body leash read).
    pub bytes: Vec<u8>,
    /// What the admission sequence handed back.
    pub admitted: Admitted<U>,
    /// How the rest of the body is framed on the client's connection: none left after a body leash read.
    pub framing: BodyFraming,
}

/// Hand an HTTP/1.1 request (`head`, planned as `plan`) over to the admission sequence with its body still on
/// `client`; `auth` is the upstream proxy's `Proxy-Authorization`, for a request sent to it. `Err` is the client's
/// connection once the refusal was answered.
pub(crate) async fn admit_h1<'h, S, D>(
    ctx: &RequestCtx<'_>,
    client: &mut BufConn<S>,
    (head, plan): (&'h RequestHead, &Plan<'_>),
    (entry, door): (Entry<'_>, &mut D),
    auth: Option<&str>,
) -> Result<Sending<'h, D::Upstream>, Next>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    D: Door + Send,
{
    let mut sent = Cow::Borrowed(head);
    let mut body = H1Body { client: &mut *client, head, framing: plan.framing };
    let admitted = match admit(ctx, entry, (&mut sent, &mut body), door).await {
        Ok(admitted) => admitted,
        Err(refused) => return Err(reply(client, &refused.answer, keep_after(plan, refused.body)).await),
    };
    let form = match admitted.through {
        Some(_) => TargetForm::Proxy { auth },
        None => TargetForm::Origin,
    };
    let target = admitted.query.as_deref().map(|q| format!("{}?{q}", split_query(plan.target.path_and_query).0));
    let sending = target.as_deref().map(|t| plan.sending(t));
    let up = sending.as_ref().unwrap_or(plan);
    let bytes = match &admitted.body {
        Some(body) => buffered_request(&sent, (up, form), body),
        None => request_head_bytes(&sent, up, form),
    };
    let framing = if admitted.body.is_some() { BodyFraming::None } else { plan.framing };
    Ok(Sending { head: sent, bytes, admitted, framing })
}

/// Whether the client's connection goes on after a refusal that left its body as `left`.
fn keep_after(plan: &Plan<'_>, left: BodyLeft) -> bool {
    match left {
        BodyLeft::Unread => plan.framing == BodyFraming::None && plan.client_keep_alive,
        BodyLeft::Read => plan.client_keep_alive,
        BodyLeft::Broken => false,
    }
}
