//! The body of the `service_request` fuzz target, shared by
//! `fuzz/fuzz_targets/service_request.rs` (via `#[path]`) and by
//! `tests/fuzz_smoke.rs` (a bounded loop on stable): arbitrary bytes as the
//! body of one service request, sent on a real opc.tcp channel inside an
//! activated anonymous session of a real gateway (demo nodes on, SQLite
//! store in a temp dir). The session (with one subscription of one item)
//! is made fresh every [`INPUTS_PER_SESSION`] inputs and after any request
//! that may have changed it.
//!
//! Input: the first byte holds flags ([`KEEP_TOKEN`], [`KEEP_SUBSCRIPTION`]),
//! the rest is a message body (the request's type NodeId, then its fields).
//! A body that decodes gets the session's authentication token and the
//! session's subscription id patched in (unless the flags say to keep what
//! the input holds), so that the fuzzer reaches the services themselves and
//! not only the session check. A body that does not decode is sent as it is.
//!
//! What must hold for any input: the gateway answers the request (a response
//! whose header echoes the request handle, or a ServiceFault) or closes the
//! channel with an Error message, within [`ANSWER_WITHIN`]; it never panics;
//! and a fresh channel and session can read afterwards.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opcua_core::{Message as _, RequestMessage, ResponseMessage};
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, BinaryDecodable as _, BinaryEncodable as _,
    CloseSessionRequest, ContextOwned, CreateMonitoredItemsRequest, CreateSessionRequest,
    CreateSubscriptionRequest, DateTime, DecodingOptions, ExtensionObject, NodeId, ObjectId,
    ReadRequest, ReadValueId, RequestHeader, ResponseHeader, StatusCode, TimestampsToReturn,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{self, TestGateway};

/// Flag: send the authentication token the input holds.
pub const KEEP_TOKEN: u8 = 1;
/// Flag: send the subscription ids the input holds.
pub const KEEP_SUBSCRIPTION: u8 = 2;

/// Longest wait for the answer to one request. The login throttle may hold
/// a failed user name for 5 s; nothing else should take long.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// The largest chunk the client accepts (its Hello's receive buffer).
const CHUNK_LIMIT: usize = 65_536;

/// Set by the panic hook: a panic anywhere in the process (a gateway task
/// included) fails the run, even where the runtime would swallow it.
static PANICKED: AtomicBool = AtomicBool::new(false);

/// The running gateway and the open channel, made once per process.
pub struct ServiceFixture {
    rt: tokio::runtime::Runtime,
    gw: TestGateway,
    conn: Mutex<Option<Live>>,
}

/// The process's fixture.
pub fn service_fixture() -> &'static ServiceFixture {
    static FIXTURE: OnceLock<ServiceFixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            prev(info);
        }));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // Reconnects after closes must never meet the connection rate limit.
        let gw = rt.block_on(TestGateway::start(
            "[server]\nconnections_per_second = 100000\nconnection_burst = 100000\n\
             min_publishing_interval = \"10ms\"\nmin_sampling_interval = \"10ms\"\n",
        ));
        ServiceFixture {
            rt,
            gw,
            conn: Mutex::new(None),
        }
    })
}

/// What came back for a request.
#[derive(Debug)]
pub enum Answer {
    /// The message body (type NodeId and fields) of the response.
    Response(Vec<u8>),
    /// An abort chunk for the request.
    Aborted,
    /// An Error message: the gateway closes the channel.
    Error(StatusCode),
    /// The channel closed without an Error message.
    Closed,
}

/// What a request got: the response's type (`ServiceFault` included) and
/// service result, or `None` for an abort, an Error message or a close.
pub type Outcome = Option<(String, StatusCode)>;

/// Inputs served by one session before it is closed and a fresh one made:
/// a fresh session per input costs five round trips, a shared one lets
/// state pile up; this bounds both.
pub const INPUTS_PER_SESSION: u32 = 32;

/// Requests after which the harness's session or subscription may be gone
/// or changed: the next input gets a fresh session.
const SESSION_CHANGING: &[&str] = &[
    "CreateSession",
    "ActivateSession",
    "CloseSession",
    "ModifySubscription",
    "SetPublishingMode",
    "DeleteSubscriptions",
    "TransferSubscriptions",
];

/// The channel and the session the inputs run in.
struct Live {
    conn: Conn,
    auth: NodeId,
    sub: u32,
    inputs: u32,
}

impl Live {
    /// Closes the session and makes a fresh one on the same channel;
    /// `None` when the channel is gone (the next input opens a new one).
    async fn renew(mut self) -> Option<Live> {
        if !self.conn.close_session(&self.auth).await {
            return None;
        }
        let (auth, sub) = self.conn.session().await;
        Some(Live {
            conn: self.conn,
            auth,
            sub,
            inputs: 0,
        })
    }
}

/// One service request from the fuzzer; panics when a property fails.
pub fn service_request(data: &[u8]) -> Outcome {
    let (&flags, body) = data.split_first()?;
    let f = service_fixture();
    let mut slot = f.conn.lock().unwrap();
    let outcome = f.rt.block_on(async {
        let mut live = match slot.take() {
            Some(l) => l,
            None => {
                let mut conn = Conn::open(&f.gw).await;
                let (auth, sub) = conn.session().await;
                Live {
                    conn,
                    auth,
                    sub,
                    inputs: 0,
                }
            }
        };
        let (body, handle, kind) = prepare(body, flags, &live.auth, live.sub);
        let id = live.conn.send(&body).await;
        let answer = live.conn.answer(id).await;
        let outcome = match &answer {
            Answer::Response(resp) => Some(check_response(resp, handle)),
            _ => None,
        };
        live.inputs += 1;
        let renew = live.inputs >= INPUTS_PER_SESSION
            || kind.is_some_and(|k| SESSION_CHANGING.contains(&k));
        match answer {
            Answer::Response(_) | Answer::Aborted => {
                *slot = if renew {
                    live.renew().await
                } else {
                    Some(live)
                };
            }
            Answer::Error(_) | Answer::Closed => {
                // The gateway is still there for a newcomer, who also takes
                // the orphaned session over and closes it (an activated
                // session is never evicted: left behind, they would fill
                // the table).
                let mut fresh = Conn::open(&f.gw).await;
                assert_eq!(fresh.read_current_time().await, StatusCode::Good);
                if fresh.activate(&live.auth).await {
                    fresh.close_session(&live.auth).await;
                }
            }
        }
        outcome
    });
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "a panic in the process (see above)"
    );
    outcome
}

/// Closes the current session: the next input starts in a fresh one (for
/// tests that need each input to start from the same state).
pub fn fresh_session() {
    let f = service_fixture();
    let mut slot = f.conn.lock().unwrap();
    if let Some(live) = slot.take() {
        *slot = f.rt.block_on(live.renew());
    }
}

/// The body to send, with token and subscription patched as `flags` say,
/// the request handle the response must echo and the request's type (when
/// it decoded).
fn prepare(
    body: &[u8],
    flags: u8,
    auth: &NodeId,
    sub: u32,
) -> (Vec<u8>, Option<u32>, Option<&'static str>) {
    let ctx = ContextOwned::default();
    let Ok(mut request) = uagate_proto::decode::decode_request_body(body, &ctx.context()) else {
        return (body.to_vec(), None, None);
    };
    if flags & KEEP_SUBSCRIPTION == 0 {
        patch_subscription(&mut request, sub);
    }
    let handle = request.request_header().request_handle;
    let kind = Some(request.type_name());
    let Ok(mut out) = encode(&request) else {
        return (body.to_vec(), None, kind);
    };
    if flags & KEEP_TOKEN == 0 {
        // The header's first field is the token: splice the session's in.
        let c = ctx.context();
        let type_len = request.type_id().byte_len(&c);
        let old_len = request.request_header().authentication_token.byte_len(&c);
        let mut token = Vec::new();
        auth.encode(&mut token, &c).unwrap();
        out.splice(type_len..type_len + old_len, token);
    }
    (out, Some(handle), kind)
}

/// Type id and fields of `request`.
fn encode(request: &RequestMessage) -> Result<Vec<u8>, opcua_types::Error> {
    let ctx = ContextOwned::default();
    let mut out = Vec::new();
    request.type_id().encode(&mut out, &ctx.context())?;
    request.encode(&mut out, &ctx.context())?;
    Ok(out)
}

/// Points every subscription id of `request` at the session's subscription.
fn patch_subscription(request: &mut RequestMessage, sub: u32) {
    fn first(ids: &mut Option<Vec<u32>>, sub: u32) {
        if let Some(id) = ids.as_mut().and_then(|v| v.first_mut()) {
            *id = sub;
        }
    }
    match request {
        RequestMessage::CreateMonitoredItems(r) => r.subscription_id = sub,
        RequestMessage::ModifyMonitoredItems(r) => r.subscription_id = sub,
        RequestMessage::DeleteMonitoredItems(r) => r.subscription_id = sub,
        RequestMessage::SetMonitoringMode(r) => r.subscription_id = sub,
        RequestMessage::SetTriggering(r) => r.subscription_id = sub,
        RequestMessage::ModifySubscription(r) => r.subscription_id = sub,
        RequestMessage::Republish(r) => r.subscription_id = sub,
        RequestMessage::SetPublishingMode(r) => first(&mut r.subscription_ids, sub),
        RequestMessage::DeleteSubscriptions(r) => first(&mut r.subscription_ids, sub),
        RequestMessage::TransferSubscriptions(r) => first(&mut r.subscription_ids, sub),
        RequestMessage::Publish(r) => {
            for ack in r.subscription_acknowledgements.iter_mut().flatten() {
                ack.subscription_id = sub;
            }
        }
        _ => {}
    }
}

/// A response body must be a response type whose header decodes and, when
/// the request decoded, echoes its handle. Returns the type's name (without
/// `_Encoding_DefaultBinary`) and the service result.
fn check_response(body: &[u8], handle: Option<u32>) -> (String, StatusCode) {
    let ctx = ContextOwned::default();
    let c = ctx.context();
    let mut r = body;
    let type_id = NodeId::decode(&mut r, &c).expect("response type id decodes");
    let object = type_id
        .as_object_id()
        .expect("response type is an ObjectId");
    let name = format!("{object:?}");
    assert!(
        object == ObjectId::ServiceFault_Encoding_DefaultBinary
            || name.ends_with("Response_Encoding_DefaultBinary"),
        "not a response type: {name}"
    );
    let header = ResponseHeader::decode(&mut r, &c).expect("response header decodes");
    if let Some(h) = handle {
        assert_eq!(header.request_handle, h, "{name} echoes the request handle");
    }
    let name = name.trim_end_matches("_Encoding_DefaultBinary").to_string();
    (name, header.service_result)
}

/// A raw opc.tcp channel (security None) to the gateway.
pub struct Conn {
    s: TcpStream,
    channel: u32,
    token: u32,
    seq: u32,
}

impl Conn {
    /// Hello + OpenSecureChannel (None).
    pub async fn open(gw: &TestGateway) -> Conn {
        let mut s = common::raw(gw.addr).await;
        s.write_all(&common::hello_bytes(&gw.url)).await.unwrap();
        let ack = common::read_frame(&mut s, ANSWER_WITHIN)
            .await
            .expect("ACK");
        assert_eq!(&ack[..4], b"ACKF", "Hello acknowledged");
        s.write_all(&common::opn_none_frame()).await.unwrap();
        let resp = common::read_frame(&mut s, ANSWER_WITHIN)
            .await
            .expect("OPN response");
        let (channel, token) = common::parse_opn_none(&resp);
        Conn {
            s,
            channel,
            token,
            seq: 2,
        }
    }

    /// Sends `body` as one single-chunk MSG; returns its request id. A
    /// failed write (the gateway closed) shows in the answer.
    pub async fn send(&mut self, body: &[u8]) -> u32 {
        let id = self.seq;
        let mut m = b"MSGF\0\0\0\0".to_vec();
        m.extend_from_slice(&self.channel.to_le_bytes());
        m.extend_from_slice(&self.token.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&id.to_le_bytes());
        m.extend_from_slice(body);
        self.seq += 1;
        let _ = self.s.write_all(&common::with_size(m)).await;
        id
    }

    /// The gateway's answer to request `id` (responses to others skipped).
    pub async fn answer(&mut self, id: u32) -> Answer {
        let mut body = Vec::new();
        loop {
            let Some(frame) = self.frame().await else {
                return Answer::Closed;
            };
            match &frame[..3] {
                b"MSG" => {
                    let rid = u32::from_le_bytes(frame[20..24].try_into().unwrap());
                    if rid != id {
                        continue;
                    }
                    match frame[3] {
                        b'C' => body.extend_from_slice(&frame[24..]),
                        b'F' => {
                            body.extend_from_slice(&frame[24..]);
                            return Answer::Response(body);
                        }
                        b'A' => return Answer::Aborted,
                        other => panic!("MSG chunk type {other}"),
                    }
                }
                b"ERR" => {
                    let msg = <opcua_core::comms::tcp_types::ErrorMessage as opcua_types::SimpleBinaryDecodable>::decode(
                        &mut &frame[..],
                        &DecodingOptions::default(),
                    )
                    .expect("Error message decodes");
                    return Answer::Error(msg.error);
                }
                other => panic!("unexpected message type {other:?}"),
            }
        }
    }

    /// The next frame; `None` when the gateway closed. Panics when nothing
    /// comes within [`ANSWER_WITHIN`] (a hang is a finding) or the frame
    /// breaks the size the client announced.
    async fn frame(&mut self) -> Option<Vec<u8>> {
        tokio::time::timeout(ANSWER_WITHIN, async {
            let mut header = [0u8; 8];
            self.s.read_exact(&mut header).await.ok()?;
            let size = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
            assert!(
                (8..=CHUNK_LIMIT).contains(&size),
                "chunk of {size} bytes against a receive buffer of {CHUNK_LIMIT}"
            );
            let mut frame = header.to_vec();
            frame.resize(size, 0);
            self.s.read_exact(&mut frame[8..]).await.ok()?;
            Some(frame)
        })
        .await
        .expect("the gateway answered within the bound")
    }

    /// A request that must succeed on a healthy gateway.
    async fn call(&mut self, request: RequestMessage) -> ResponseMessage {
        let id = self.send(&common::encode_request(&request)).await;
        match self.answer(id).await {
            Answer::Response(body) => common::decode_response(&body),
            other => panic!("{}: {other:?}", request.type_name()),
        }
    }

    /// A fresh activated anonymous session with one subscription holding
    /// one monitored item: its authentication token and subscription id.
    pub async fn session(&mut self) -> (NodeId, u32) {
        let created = self
            .call(
                CreateSessionRequest {
                    request_header: header(&NodeId::null()),
                    session_name: "fuzz".into(),
                    requested_session_timeout: 60_000.0,
                    ..Default::default()
                }
                .into(),
            )
            .await;
        let ResponseMessage::CreateSession(created) = created else {
            panic!("CreateSession: {created:?}");
        };
        let auth = created.authentication_token.clone();
        assert!(
            self.activate(&auth).await,
            "ActivateSession of a new session"
        );
        let sub = self
            .call(
                CreateSubscriptionRequest {
                    request_header: header(&auth),
                    requested_publishing_interval: 10.0,
                    requested_lifetime_count: 300,
                    requested_max_keep_alive_count: 2,
                    publishing_enabled: true,
                    ..Default::default()
                }
                .into(),
            )
            .await;
        let ResponseMessage::CreateSubscription(sub) = sub else {
            panic!("CreateSubscription: {sub:?}");
        };
        let items = self
            .call(
                CreateMonitoredItemsRequest {
                    request_header: header(&auth),
                    subscription_id: sub.subscription_id,
                    timestamps_to_return: TimestampsToReturn::Both,
                    items_to_create: Some(vec![common::value_item(
                        common::demo("Gateway.Demo.Counter"),
                        1,
                        10.0,
                    )]),
                }
                .into(),
            )
            .await;
        assert!(
            matches!(items, ResponseMessage::CreateMonitoredItems(_)),
            "CreateMonitoredItems: {items:?}"
        );
        (auth, sub.subscription_id)
    }

    /// Anonymous ActivateSession of session `auth` on this channel; false
    /// when refused (the session is gone).
    async fn activate(&mut self, auth: &NodeId) -> bool {
        let request: RequestMessage = ActivateSessionRequest {
            request_header: header(auth),
            user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        }
        .into();
        let id = self.send(&common::encode_request(&request)).await;
        match self.answer(id).await {
            Answer::Response(body) => matches!(
                common::decode_response(&body),
                ResponseMessage::ActivateSession(_)
            ),
            other => panic!("ActivateSession: {other:?}"),
        }
    }

    /// Closes the session (and its subscriptions); false when the channel
    /// is gone. A fault (the input closed it already) is fine.
    async fn close_session(&mut self, auth: &NodeId) -> bool {
        let request: RequestMessage = CloseSessionRequest {
            request_header: header(auth),
            delete_subscriptions: true,
        }
        .into();
        let id = self.send(&common::encode_request(&request)).await;
        matches!(self.answer(id).await, Answer::Response(_))
    }

    /// Reads Server_ServerStatus_CurrentTime in a session of its own.
    async fn read_current_time(&mut self) -> StatusCode {
        let (auth, _) = self.session().await;
        let read = self
            .call(
                ReadRequest {
                    request_header: header(&auth),
                    max_age: 0.0,
                    timestamps_to_return: TimestampsToReturn::Both,
                    nodes_to_read: Some(vec![ReadValueId::from(common::current_time())]),
                }
                .into(),
            )
            .await;
        self.close_session(&auth).await;
        match read {
            ResponseMessage::Read(r) => r.results.unwrap()[0].status(),
            other => panic!("Read: {other:?}"),
        }
    }
}

/// A request header for session `auth` with a 10 s timeout hint.
fn header(auth: &NodeId) -> RequestHeader {
    let mut h = RequestHeader::new(auth, &DateTime::now(), 1);
    h.timeout_hint = 10_000;
    h
}
