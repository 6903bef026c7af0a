//! A hand-made UA-TCP (UACP) client for SecurityPolicy None over any
//! [`Frames`] transport (a TCP or TLS byte stream, or one UACP message per
//! WebSocket message): Hello, OpenSecureChannel, an anonymous session,
//! single-chunk requests (multi-chunk responses), CloseSession and CLO.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use opcua_types::{
    BinaryEncodable, ByteString, CloseSecureChannelRequest, CloseSessionRequest, ContextOwned,
    DateTime, MessageInfo, MessageSecurityMode, NodeId, OpenSecureChannelRequest, RequestHeader,
    SecurityTokenRequestType, StatusCode,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::service::{decode_body, encode_body, open_session, Call, Reply};
use crate::STEP;

/// URI of SecurityPolicy None.
pub const NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";
/// Receive/send buffer size offered in Hello; larger responses come in chunks.
pub const BUFFER: u32 = 65_536;
/// Largest frame (or HTTP body) accepted from the server.
pub const MAX_FRAME: usize = 1 << 24;

/// Puts the frame length into bytes 4..8 of a UA-TCP frame.
pub fn with_size(mut frame: Vec<u8>) -> Result<Vec<u8>> {
    let n = u32::try_from(frame.len()).context("frame too large")?;
    frame[4..8].copy_from_slice(&n.to_le_bytes());
    Ok(frame)
}

/// Appends a UA String (Int32 length, UTF-8 bytes).
pub fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let n = i32::try_from(s.len()).context("string too long")?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The little-endian UInt32 at byte `at` of `b`.
pub fn le_u32(b: &[u8], at: usize) -> Result<u32> {
    let s = b.get(at..at + 4).context("truncated frame")?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The size of the frame whose 8-byte header starts `header`, checked
/// against 8..=[`MAX_FRAME`].
pub fn frame_size(header: &[u8]) -> Result<usize> {
    let size = le_u32(header, 4)? as usize;
    if !(8..=MAX_FRAME).contains(&size) {
        bail!("bad frame size {size}");
    }
    Ok(size)
}

/// Reads one whole UA-TCP frame (header + body) from a byte stream.
pub async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>> {
    let mut header = [0u8; 8];
    s.read_exact(&mut header).await?;
    let size = frame_size(&header)?;
    let mut frame = header.to_vec();
    frame.resize(size, 0);
    s.read_exact(&mut frame[8..]).await?;
    Ok(frame)
}

/// Connects a TCP socket (no Nagle) to `to`, bound to source address `src`
/// when given (any port), else from the address the system picks.
pub async fn tcp_connect(to: SocketAddr, src: Option<IpAddr>) -> Result<TcpStream> {
    let s = match src {
        Some(src) => {
            let socket = if src.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket
                .bind(SocketAddr::new(src, 0))
                .with_context(|| format!("binding {src}"))?;
            socket.connect(to).await
        }
        None => TcpStream::connect(to).await,
    }
    .context("connect")?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// A transport of whole UACP frames.
///
/// Every byte stream is one (frames are written and read back to back);
/// a binary that carries UACP some other way implements it for its own type.
pub trait Frames: Send {
    /// Sends one whole frame.
    fn send(&mut self, frame: Vec<u8>) -> impl Future<Output = Result<()>> + Send;
    /// Receives one whole frame (header + body), waiting as long as it takes.
    fn recv(&mut self) -> impl Future<Output = Result<Vec<u8>>> + Send;
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Frames for S {
    async fn send(&mut self, frame: Vec<u8>) -> Result<()> {
        self.write_all(&frame).await.context("write")
    }

    async fn recv(&mut self) -> Result<Vec<u8>> {
        read_frame(self).await
    }
}

/// One anonymous session on its own UACP connection and secure channel
/// (SecurityPolicy None).
pub struct Session<P> {
    pipe: P,
    channel: u32,
    token: u32,
    seq: u32,
    auth: NodeId,
    ctx: ContextOwned,
}

impl<P: Frames> Session<P> {
    /// Hello, OpenSecureChannel (None) and an anonymous session named `name`
    /// over `pipe` to the endpoint `url`.
    pub async fn open(pipe: P, url: &str, name: &str) -> Result<Session<P>> {
        let mut session = Session {
            pipe,
            channel: 0,
            token: 0,
            seq: 2,
            auth: NodeId::null(),
            ctx: ContextOwned::default(),
        };
        let mut hel = b"HELF\0\0\0\0".to_vec();
        for v in [0, BUFFER, BUFFER, 0, 0] {
            hel.extend_from_slice(&v.to_le_bytes());
        }
        put_string(&mut hel, url)?;
        session.pipe.send(with_size(hel)?).await?;
        let ack = session.recv().await?;
        match ack.get(..4) {
            Some(b"ACKF") => {}
            Some(b"ERRF") => bail!("Hello refused: {}", StatusCode::from(le_u32(&ack, 8)?)),
            _ => bail!("unexpected answer to Hello"),
        }

        let mut opn = b"OPNF\0\0\0\0".to_vec();
        opn.extend_from_slice(&0u32.to_le_bytes());
        put_string(&mut opn, NONE_URI)?;
        opn.extend_from_slice(&(-1i32).to_le_bytes());
        opn.extend_from_slice(&(-1i32).to_le_bytes());
        opn.extend_from_slice(&1u32.to_le_bytes());
        opn.extend_from_slice(&1u32.to_le_bytes());
        encode_body(
            &mut opn,
            &OpenSecureChannelRequest {
                request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1),
                client_protocol_version: 0,
                request_type: SecurityTokenRequestType::Issue,
                security_mode: MessageSecurityMode::None,
                client_nonce: ByteString::null(),
                requested_lifetime: 600_000,
            },
            &session.ctx,
        )?;
        session.pipe.send(with_size(opn)?).await?;
        let resp = session.recv().await?;
        match resp.get(..4) {
            Some(b"OPNF") => {}
            Some(b"ERRF") => bail!(
                "OpenSecureChannel refused: {}",
                StatusCode::from(le_u32(&resp, 8)?)
            ),
            _ => bail!("unexpected answer to OpenSecureChannel"),
        }
        session.channel = le_u32(&resp, 8)?;
        // Skip policy URI, sender certificate, receiver thumbprint, sequence header.
        let mut at = 12;
        for _ in 0..3 {
            let n = le_u32(&resp, at)? as i32;
            at += 4 + usize::try_from(n.max(0))?;
        }
        at += 8;
        let body = resp.get(at..).context("truncated OPN response")?;
        let Reply::Opn(r) = decode_body(body, &session.ctx)? else {
            bail!("OpenSecureChannel failed");
        };
        session.token = r.security_token.token_id;
        session.auth = open_session(&mut session, name).await?;
        Ok(session)
    }

    /// Receives one frame within [`STEP`].
    async fn recv(&mut self) -> Result<Vec<u8>> {
        tokio::time::timeout(STEP, self.pipe.recv())
            .await
            .context("no response within 30 s")?
    }

    /// A single-chunk symmetric frame of type `kind` (e.g. `MSGF`) carrying `m`.
    fn frame<M: BinaryEncodable + MessageInfo>(
        &mut self,
        kind: &[u8; 4],
        m: &M,
    ) -> Result<Vec<u8>> {
        let mut f = kind.to_vec();
        f.extend_from_slice(&[0; 4]);
        f.extend_from_slice(&self.channel.to_le_bytes());
        f.extend_from_slice(&self.token.to_le_bytes());
        f.extend_from_slice(&self.seq.to_le_bytes());
        f.extend_from_slice(&self.seq.to_le_bytes());
        self.seq = self.seq.wrapping_add(1);
        encode_body(&mut f, m, &self.ctx)?;
        with_size(f)
    }

    /// CloseSession, then CLO (no answer expected); hands back the
    /// transport so the caller can shut it down its own way.
    pub async fn close(mut self) -> Result<P> {
        let header = self.header();
        let _ = self
            .call(&CloseSessionRequest {
                request_header: header,
                delete_subscriptions: true,
            })
            .await?;
        let clo = self.frame(
            b"CLOF",
            &CloseSecureChannelRequest {
                request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), self.seq),
            },
        )?;
        self.pipe.send(clo).await?;
        Ok(self.pipe)
    }
}

impl<P: Frames> Call for Session<P> {
    fn header(&self) -> RequestHeader {
        RequestHeader::new(&self.auth, &DateTime::now(), self.seq)
    }

    /// Sends one request (single chunk) and waits for its whole response.
    async fn call<M: BinaryEncodable + MessageInfo + Sync>(
        &mut self,
        request: &M,
    ) -> Result<Reply> {
        self.send_request(request).await?;
        let (_, reply) = self.recv_reply(STEP).await?;
        Ok(reply)
    }
}

impl<P: Frames> Session<P> {
    /// Sends one request (single chunk) without waiting for its response;
    /// returns its request id, which [`Session::recv_reply`] hands back
    /// with the response. Lets a caller keep several requests outstanding
    /// (e.g. Publish).
    pub async fn send_request<M: BinaryEncodable + MessageInfo>(
        &mut self,
        request: &M,
    ) -> Result<u32> {
        let id = self.seq;
        let m = self.frame(b"MSGF", request)?;
        self.pipe.send(m).await?;
        Ok(id)
    }

    /// Receives the next whole response, to whichever request it answers,
    /// waiting at most `wait` for each of its chunks: its request id and
    /// the decoded reply.
    pub async fn recv_reply(&mut self, wait: Duration) -> Result<(u32, Reply)> {
        // Intermediate chunks (MSGC) are concatenated until the final one.
        let mut body = Vec::new();
        let mut request_id;
        loop {
            let frame = tokio::time::timeout(wait, self.pipe.recv())
                .await
                .with_context(|| format!("no response within {} s", wait.as_secs()))??;
            if frame.get(..4) == Some(b"ERRF") {
                bail!("server error {}", StatusCode::from(le_u32(&frame, 8)?));
            }
            let part = frame.get(24..).context("truncated MSG frame")?;
            request_id = le_u32(&frame, 20)?;
            match frame.get(..4) {
                Some(b"MSGF") if body.is_empty() => {
                    // Single chunk: decode in place.
                    return Ok((request_id, decode_body(part, &self.ctx)?));
                }
                Some(b"MSGF") => {
                    body.extend_from_slice(part);
                    break;
                }
                Some(b"MSGC") => body.extend_from_slice(part),
                _ => bail!("unexpected frame type"),
            }
        }
        Ok((request_id, decode_body(&body, &self.ctx)?))
    }
}
