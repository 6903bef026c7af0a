//! Decoding a reassembled request with a bound on decoder recursion.
//!
//! The OPC UA binary decoder recurses for nested structures. A few nesting
//! paths (a Variant holding a DataValue holding a Variant, DiagnosticInfo
//! inside DiagnosticInfo) are not covered by the decoder's own depth gauge,
//! so a 2 KB request could overflow the stack and abort the process. Every
//! recursion level reads at least one byte, so the reader below measures how
//! far the stack has grown since decoding began and fails the read once it
//! exceeds [`STACK_BUDGET`]: the request is then refused with
//! BadDecodingError instead of crashing the gateway.

use std::io::Read;

use opcua_core::comms::message_chunk::MessageChunk;
use opcua_core::comms::secure_channel::SecureChannel;
use opcua_core::{Message as _, RequestMessage};
use opcua_types::{BinaryDecodable, NodeId};

use crate::error::ProtoError;

/// Most stack the decoder may use for one request. Legitimate requests stay
/// far below it (the decoder's own depth gauge limits ordinary nesting);
/// tokio worker threads have 2 MiB, so this leaves ample headroom.
pub const STACK_BUDGET: usize = 256 * 1024;

/// Address of a local variable: a cheap, safe reading of the stack position.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// A byte reader that fails once the call stack has grown more than
/// `budget` bytes below the position recorded when it was created.
struct StackGuardedReader<'a> {
    data: &'a [u8],
    base: usize,
    budget: usize,
    tripped: bool,
}

impl Read for StackGuardedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let here = stack_position();
        if self.base.abs_diff(here) > self.budget {
            self.tripped = true;
            return Err(std::io::Error::other(
                "decoder nesting exceeds the stack budget",
            ));
        }
        self.data.read(buf)
    }
}

/// Decodes the request carried by `chunks` (already verified and
/// decrypted) using the channel's decoding limits.
pub fn decode_request(
    chunks: &[MessageChunk],
    channel: &SecureChannel,
) -> Result<RequestMessage, ProtoError> {
    decode_with_budget(chunks, channel, STACK_BUDGET)
}

pub(crate) fn decode_with_budget(
    chunks: &[MessageChunk],
    channel: &SecureChannel,
    budget: usize,
) -> Result<RequestMessage, ProtoError> {
    let mut body = Vec::new();
    for chunk in chunks {
        let info = chunk.chunk_info(channel)?;
        let start = info.body_offset;
        let end = start
            .checked_add(info.body_length)
            .filter(|end| *end <= chunk.data.len())
            .ok_or_else(|| ProtoError::Decoding("chunk body out of bounds".into()))?;
        body.extend_from_slice(&chunk.data[start..end]);
    }
    let ctx_owned = channel.context();
    decode_body_with_budget(&body, &ctx_owned.context(), budget)
}

/// Decodes one request from a message body: the binary encoding NodeId of
/// the request type followed by its fields. This is what a secure-channel
/// message carries after its chunks are joined, and what an opc.https POST
/// carries (OPC 10000-6 §7.4.4). Deep nesting is refused like on opc.tcp.
pub fn decode_request_body(
    body: &[u8],
    ctx: &opcua_types::Context<'_>,
) -> Result<RequestMessage, ProtoError> {
    decode_body_with_budget(body, ctx, STACK_BUDGET)
}

/// Encodes a response as a message body (type NodeId then fields), the
/// form an opc.https response carries.
pub fn encode_response_body(
    response: &opcua_core::ResponseMessage,
    ctx: &opcua_types::Context<'_>,
) -> Result<Vec<u8>, ProtoError> {
    use opcua_core::Message as _;
    use opcua_types::BinaryEncodable as _;
    let type_id = response.type_id();
    let mut out = Vec::with_capacity(type_id.byte_len(ctx) + response.byte_len(ctx));
    type_id.encode(&mut out, ctx).map_err(ProtoError::from)?;
    response.encode(&mut out, ctx).map_err(ProtoError::from)?;
    Ok(out)
}

fn decode_body_with_budget(
    body: &[u8],
    ctx: &opcua_types::Context<'_>,
    budget: usize,
) -> Result<RequestMessage, ProtoError> {
    let mut reader = StackGuardedReader {
        data: body,
        base: stack_position(),
        budget,
        tripped: false,
    };
    let result = NodeId::decode(&mut reader, ctx).and_then(|type_id| {
        let object_id = type_id
            .as_object_id()
            .map_err(|_| opcua_types::Error::decoding("message type id is not an object id"))?;
        RequestMessage::decode_by_object_id(&mut reader, object_id, ctx)
    });
    match result {
        Ok(request) => Ok(request),
        Err(_) if reader.tripped => Err(ProtoError::Decoding(
            "request nesting exceeds the decoder stack budget".into(),
        )),
        // The request header decoded (the error carries its handle) and a
        // field after it did not: a wrong request, not a broken stream.
        // Limits of the decoder (BadEncodingLimitsExceeded) still close.
        Err(e) if e.status() == opcua_types::StatusCode::BadDecodingError => {
            let detail = e.to_string();
            match e.with_request_id(0).full_context() {
                Some((_, request_handle)) => Err(ProtoError::RequestUndecodable {
                    request_handle,
                    detail,
                }),
                None => Err(ProtoError::Decoding(detail)),
            }
        }
        Err(e) => Err(ProtoError::from(e)),
    }
}
