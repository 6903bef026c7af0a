//! The console's static files: htmx (vendored from the npm package
//! htmx.org), the style sheet and the console's own small script,
//! compiled into the binary.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// `GET /static/htmx.min.js` (vendored from the npm package htmx.org).
pub async fn htmx() -> Response {
    static_asset(
        include_bytes!("../../../static/htmx.min.js"),
        "text/javascript",
    )
}

/// `GET /static/console.js`: shows the UTC times the pages write in the
/// browser's time zone (see `static/console.js`).
pub async fn script() -> Response {
    static_asset(
        include_bytes!("../../../static/console.js"),
        "text/javascript",
    )
}

/// `GET /static/favicon.svg` and `GET /favicon.ico`: the console's icon
/// in the browser tab (SVG; browsers take it under either name).
pub async fn favicon() -> Response {
    static_asset(
        include_bytes!("../../../static/favicon.svg"),
        "image/svg+xml",
    )
}

/// `GET /static/console.css`.
pub async fn css() -> Response {
    static_asset(include_bytes!("../../../static/console.css"), "text/css")
}

fn static_asset(body: &'static [u8], content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}
