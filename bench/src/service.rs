//! Service messages of the hand-made clients: encoding requests, decoding
//! the responses they expect, and the session steps shared by every
//! transport (CreateSession + anonymous ActivateSession, the benchmark Read).

use std::future::Future;

use anyhow::{bail, Result};
use opcua_types::{
    ActivateSessionRequest, ActivateSessionResponse, AnonymousIdentityToken, BinaryDecodable,
    BinaryEncodable, ContextOwned, CreateMonitoredItemsResponse, CreateSessionRequest,
    CreateSessionResponse, CreateSubscriptionResponse, DateTime, ExtensionObject, MessageInfo,
    NodeId, ObjectId, OpenSecureChannelResponse, PublishResponse, ReadRequest, ReadResponse,
    RequestHeader, ServiceFault, StatusCode, TimestampsToReturn,
};

use crate::{nodes_to_read, NODES};

/// What a response body decoded to.
pub enum Reply {
    /// OpenSecureChannelResponse.
    Opn(Box<OpenSecureChannelResponse>),
    /// CreateSessionResponse.
    Created(Box<CreateSessionResponse>),
    /// ActivateSessionResponse with a Good service result.
    Activated,
    /// ReadResponse.
    Read(Box<ReadResponse>),
    /// CloseSessionResponse.
    Closed,
    /// CreateSubscriptionResponse.
    Subscribed(Box<CreateSubscriptionResponse>),
    /// CreateMonitoredItemsResponse.
    Monitored(Box<CreateMonitoredItemsResponse>),
    /// PublishResponse (any service result).
    Published(Box<PublishResponse>),
    /// ServiceFault, or ActivateSessionResponse with a Bad service result.
    Fault(StatusCode),
}

/// Appends the request's binary encoding type NodeId and fields to `out`.
pub fn encode_body<M: BinaryEncodable + MessageInfo>(
    out: &mut Vec<u8>,
    message: &M,
    ctx: &ContextOwned,
) -> Result<()> {
    let ctx = ctx.context();
    NodeId::from(message.type_id())
        .encode(out, &ctx)
        .map_err(|e| anyhow::anyhow!("encoding type id: {e}"))?;
    message
        .encode(out, &ctx)
        .map_err(|e| anyhow::anyhow!("encoding request: {e}"))?;
    Ok(())
}

/// Decodes a response body (type NodeId and fields) into a [`Reply`].
pub fn decode_body(mut body: &[u8], ctx: &ContextOwned) -> Result<Reply> {
    let ctx = ctx.context();
    let err = |e: opcua_types::Error| anyhow::anyhow!("decoding response: {e}");
    let type_id = NodeId::decode(&mut body, &ctx).map_err(err)?;
    let id = type_id
        .as_object_id()
        .map_err(|_| anyhow::anyhow!("response type {type_id} is not an ns0 object"))?;
    Ok(match id {
        ObjectId::OpenSecureChannelResponse_Encoding_DefaultBinary => Reply::Opn(Box::new(
            OpenSecureChannelResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::CreateSessionResponse_Encoding_DefaultBinary => Reply::Created(Box::new(
            CreateSessionResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::ActivateSessionResponse_Encoding_DefaultBinary => {
            let r = ActivateSessionResponse::decode(&mut body, &ctx).map_err(err)?;
            if r.response_header.service_result.is_good() {
                Reply::Activated
            } else {
                Reply::Fault(r.response_header.service_result)
            }
        }
        ObjectId::ReadResponse_Encoding_DefaultBinary => Reply::Read(Box::new(
            ReadResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::CloseSessionResponse_Encoding_DefaultBinary => Reply::Closed,
        ObjectId::CreateSubscriptionResponse_Encoding_DefaultBinary => Reply::Subscribed(Box::new(
            CreateSubscriptionResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::CreateMonitoredItemsResponse_Encoding_DefaultBinary => Reply::Monitored(
            Box::new(CreateMonitoredItemsResponse::decode(&mut body, &ctx).map_err(err)?),
        ),
        ObjectId::PublishResponse_Encoding_DefaultBinary => Reply::Published(Box::new(
            PublishResponse::decode(&mut body, &ctx).map_err(err)?,
        )),
        ObjectId::ServiceFault_Encoding_DefaultBinary => Reply::Fault(
            ServiceFault::decode(&mut body, &ctx)
                .map_err(err)?
                .response_header
                .service_result,
        ),
        other => bail!("unexpected response type {other:?}"),
    })
}

/// A session that sends one service request and waits for its response.
pub trait Call: Send {
    /// Header of the next request: the session's authentication token and
    /// its current request handle.
    fn header(&self) -> RequestHeader;

    /// Sends `request` and waits for its whole response.
    fn call<M: BinaryEncodable + MessageInfo + Sync>(
        &mut self,
        request: &M,
    ) -> impl Future<Output = Result<Reply>> + Send;
}

/// CreateSession named `name` + anonymous ActivateSession; returns the
/// authentication token.
pub async fn open_session<C: Call>(s: &mut C, name: &str) -> Result<NodeId> {
    let create = CreateSessionRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1000),
        session_name: name.into(),
        requested_session_timeout: 600_000.0,
        ..Default::default()
    };
    let auth = match s.call(&create).await? {
        Reply::Created(created) => created.authentication_token.clone(),
        Reply::Fault(st) => bail!("CreateSession failed: {st}"),
        _ => bail!("CreateSession: unexpected response"),
    };
    let activate = ActivateSessionRequest {
        request_header: RequestHeader::new(&auth, &DateTime::now(), 1001),
        user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
            policy_id: "anonymous".into(),
        }),
        ..Default::default()
    };
    match s.call(&activate).await? {
        Reply::Activated => Ok(auth),
        Reply::Fault(st) => bail!("ActivateSession failed: {st}"),
        _ => bail!("ActivateSession: unexpected response"),
    }
}

/// One Read of the ten [`NODES`] (TimestampsToReturn Neither): `Ok(Ok(true))`
/// when every result is Good with a value, `Ok(Err(status))` on a
/// ServiceFault, `Err` when the session broke.
pub async fn read<C: Call>(s: &mut C) -> Result<Result<bool, StatusCode>> {
    let request = ReadRequest {
        request_header: s.header(),
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: Some(nodes_to_read()),
    };
    match s.call(&request).await? {
        Reply::Read(r) => {
            let results = r.results.unwrap_or_default();
            Ok(Ok(results.len() == NODES.len()
                && results.iter().all(|dv| {
                    dv.status.is_none_or(|s| s.is_good()) && dv.value.is_some()
                })))
        }
        Reply::Fault(s) => Ok(Err(s)),
        _ => bail!("Read: unexpected response"),
    }
}
