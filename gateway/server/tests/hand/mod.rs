//! A minimal hand-made UA-TCP client (security None) on a socket bound to a
//! chosen 127.x source address, for tests of per-owner behaviour.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{self, hello_bytes, read_frame, with_size};
use opcua_core::{Message, RequestMessage, ResponseMessage};
use opcua_types::{
    ActivateSessionRequest, AnonymousIdentityToken, BinaryDecodable, BinaryEncodable, ContextOwned,
    CreateSessionRequest, DateTime, ExtensionObject, NodeId, ReadRequest, ReadValueId,
    RequestHeader, StatusCode, TimestampsToReturn,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

pub const WAIT: Duration = Duration::from_secs(5);

/// A TCP connection to the gateway from source address `src`.
pub async fn connect_from(src: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((src, 0))).unwrap();
    common::bounded("connect", socket.connect(to))
        .await
        .unwrap()
}

/// Sends Hello: Ok when acknowledged, Err(status) when refused with an Error message.
pub async fn hello(s: &mut TcpStream, url: &str) -> Result<(), StatusCode> {
    s.write_all(&hello_bytes(url)).await.unwrap();
    let frame = read_frame(s, WAIT).await.expect("an answer to Hello");
    match &frame[..4] {
        b"ACKF" => Ok(()),
        b"ERRF" => Err(StatusCode::from(u32::from_le_bytes(
            frame[8..12].try_into().unwrap(),
        ))),
        other => panic!("unexpected frame {other:?}"),
    }
}

/// A minimal hand-made UA-TCP client on a socket bound to a chosen source.
pub struct HandClient {
    s: TcpStream,
    channel: u32,
    token: u32,
    seq: u32,
    auth: NodeId,
    ctx: ContextOwned,
}

impl HandClient {
    /// Hello + OpenSecureChannel (None) on an already connected socket.
    pub async fn open(mut s: TcpStream, url: &str) -> HandClient {
        hello(&mut s, url).await.expect("admitted");
        s.write_all(&common::opn_none_frame()).await.unwrap();
        let resp = read_frame(&mut s, WAIT).await.expect("OPN response");
        let (channel, token) = common::parse_opn_none(&resp);
        let ctx = ContextOwned::default();
        HandClient {
            s,
            channel,
            token,
            seq: 2,
            auth: NodeId::null(),
            ctx,
        }
    }

    fn decode(mut body: &[u8], ctx: &ContextOwned) -> ResponseMessage {
        let ctx = ctx.context();
        let type_id = NodeId::decode(&mut body, &ctx).unwrap();
        ResponseMessage::decode_by_object_id(&mut body, type_id.as_object_id().unwrap(), &ctx)
            .unwrap()
    }

    pub fn header(&self) -> RequestHeader {
        RequestHeader::new(&self.auth, &DateTime::now(), self.seq)
    }

    pub async fn call(&mut self, request: RequestMessage) -> ResponseMessage {
        self.send(request).await;
        self.recv().await
    }

    /// Sends a request without waiting for its response; returns its request id.
    pub async fn send(&mut self, request: RequestMessage) -> u32 {
        let (id, frame) = self.frame(request);
        self.s.write_all(&frame).await.unwrap();
        id
    }

    /// Sends many requests in one socket write, so the gateway receives them
    /// as one burst (what a pipelining client does), without waiting.
    pub async fn send_burst(&mut self, requests: Vec<RequestMessage>) {
        let mut burst = Vec::new();
        for r in requests {
            burst.extend_from_slice(&self.frame(r).1);
        }
        self.s.write_all(&burst).await.unwrap();
    }

    /// One single-chunk MSG frame for `request` and its request id.
    fn frame(&mut self, request: RequestMessage) -> (u32, Vec<u8>) {
        let id = self.seq;
        let mut m = b"MSGF\0\0\0\0".to_vec();
        m.extend_from_slice(&self.channel.to_le_bytes());
        m.extend_from_slice(&self.token.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&self.seq.to_le_bytes());
        self.seq += 1;
        request
            .type_id()
            .encode(&mut m, &self.ctx.context())
            .unwrap();
        request.encode(&mut m, &self.ctx.context()).unwrap();
        (id, with_size(m))
    }

    /// The next response (single chunk).
    pub async fn recv(&mut self) -> ResponseMessage {
        self.recv_with_id().await.1
    }

    /// The next response and the request id it answers.
    pub async fn recv_with_id(&mut self) -> (u32, ResponseMessage) {
        let frame = read_frame(&mut self.s, WAIT).await.expect("a response");
        assert_eq!(&frame[..4], b"MSGF", "single-chunk response expected");
        let id = u32::from_le_bytes(frame[20..24].try_into().unwrap());
        (id, Self::decode(&frame[24..], &self.ctx))
    }

    /// CreateSession + anonymous ActivateSession + Read of CurrentTime.
    pub async fn session_and_read(&mut self) -> StatusCode {
        let created = self
            .call(
                CreateSessionRequest {
                    request_header: self.header(),
                    session_name: "isolation".into(),
                    requested_session_timeout: 60_000.0,
                    ..Default::default()
                }
                .into(),
            )
            .await;
        let _ = self.activate_anonymous(created).await;
        self.read_current_time().await
    }

    /// Anonymous activation after a CreateSession response.
    pub async fn activate_anonymous(&mut self, created: ResponseMessage) -> ResponseMessage {
        let ResponseMessage::CreateSession(created) = created else {
            panic!("CreateSession failed: {created:?}");
        };
        self.auth = created.authentication_token.clone();
        let activated = self
            .call(
                ActivateSessionRequest {
                    request_header: self.header(),
                    user_identity_token: ExtensionObject::from_message(AnonymousIdentityToken {
                        policy_id: "anonymous".into(),
                    }),
                    ..Default::default()
                }
                .into(),
            )
            .await;
        assert!(
            matches!(activated, ResponseMessage::ActivateSession(_)),
            "ActivateSession failed: {activated:?}"
        );
        activated
    }

    /// A Read request of CurrentTime.
    pub fn read_request(&self) -> RequestMessage {
        ReadRequest {
            request_header: self.header(),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(0, 2258u32))]),
        }
        .into()
    }

    /// Reads CurrentTime; returns its status.
    pub async fn read_current_time(&mut self) -> StatusCode {
        let read = self
            .call(
                ReadRequest {
                    request_header: self.header(),
                    max_age: 0.0,
                    timestamps_to_return: TimestampsToReturn::Both,
                    nodes_to_read: Some(vec![ReadValueId::from(NodeId::new(0, 2258u32))]),
                }
                .into(),
            )
            .await;
        match read {
            ResponseMessage::Read(r) => r.results.unwrap()[0].status(),
            other => panic!("Read failed: {other:?}"),
        }
    }
}
