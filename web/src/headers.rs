//! Security headers on every console and REST response.
//!
//! Added by a layer around the whole console router ([`crate::app`]), so
//! pages, partials, static files, REST answers and errors all carry them:
//! the browser runs only the console's own scripts and styles (no inline
//! script or style, no `eval`), never frames the console, never sniffs a
//! content type, sends no referrer to other sites, and keeps to HTTPS for
//! the console's host.
//!
//! The referrer policy is `same-origin`, not `no-referrer`: under
//! `no-referrer` browsers send `Origin: null` with a form post, and the
//! console's same-origin check ([`crate::access::guard`]) would refuse
//! every form.

use axum::http::{header, HeaderName, HeaderValue};

/// The console's Content-Security-Policy: everything from the console's
/// own origin, nothing inline, no plugins, no framing, forms post only to
/// the console.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// HSTS for a year; not for subdomains (the appliance is reached by its
/// own name or address, and must not decide for its neighbours).
pub const STRICT_TRANSPORT_SECURITY: &str = "max-age=31536000";

/// The headers and their values, in the order they are set.
pub fn security_headers() -> [(HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ),
        (
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(STRICT_TRANSPORT_SECURITY),
        ),
    ]
}

/// Middleware: sets the security headers on a response (a handler's own
/// value of one of them wins).
pub async fn add(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    for (name, value) in security_headers() {
        headers.entry(name).or_insert(value);
    }
    resp
}
