//! Whether a change reached the other members of the pair, in the answer
//! to the request that made it.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

/// The answer header saying whether every other member of the pair had
/// the request's replicated changes when it was answered.
pub const REPLICATED_HEADER: &str = "x-uagate-replicated";

/// Largest JSON answer that gets a `replicated` field (larger ones keep
/// the header only).
const MAX_REWRITTEN: usize = 4 << 20;

/// Around every state-changing request (not GET/HEAD): runs it inside
/// [`uagate_store::report_replication`]. On a paired appliance whose
/// request made replicated changes, the answer carries
/// [`REPLICATED_HEADER`] `true|false` and, when it is a JSON object, a
/// `replicated` field (pair without witness: the primary answers once it
/// committed, after waiting up to 1 s for the standby).
pub async fn answer(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    let (response, replicated) = uagate_store::report_replication(next.run(req)).await;
    let Some(replicated) = replicated else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    parts.headers.insert(
        REPLICATED_HEADER,
        HeaderValue::from_static(if replicated { "true" } else { "false" }),
    );
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return Response::from_parts(parts, body);
    }
    let bytes = match axum::body::to_bytes(body, MAX_REWRITTEN).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "answer not rewritten with `replicated`");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(mut object)) => {
            object.insert("replicated".into(), serde_json::Value::Bool(replicated));
            parts.headers.remove(header::CONTENT_LENGTH);
            Body::from(serde_json::Value::Object(object).to_string())
        }
        _ => Body::from(bytes),
    };
    Response::from_parts(parts, body)
}
