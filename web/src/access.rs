//! What every request passes on its way to a handler: the [`guard`]
//! middleware around the whole router (same-origin and CSRF checks,
//! session renewal, clearing a shown notice), the [`Authed`] extractor
//! (the caller, with the role the store holds now), and the one role
//! check: each route of [`crate::routes`] declares its [`Access`], and
//! `enforce` refuses a caller below it before the handler runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use uagate_store::Role;

use crate::auth::{cookie_value, session_cookie, unix_now, Authed, COOKIE, TOKEN_LIFETIME};
use crate::error::ApiError;
use crate::state::WebState;

/// Cookie that carries a one-shot notice across a post-redirect-get (set
/// by the console's pages, cleared by [`guard`] once a page showed it).
pub const FLASH: &str = "uagate_flash";

/// Header that carries the CSRF token on console requests made by htmx.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Form field that carries the CSRF token on plain form posts.
pub const CSRF_FIELD: &str = "_csrf";

/// Header set by the console's periodic refreshes: such requests do not
/// count as activity, so an unattended dashboard still logs out.
pub const POLL_HEADER: &str = "x-uagate-poll";

/// Where a request's token came from.
fn token_of(headers: &HeaderMap) -> Option<(&str, bool)> {
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return v.strip_prefix("Bearer ").map(|t| (t.trim(), false));
    }
    cookie_token(headers).map(|t| (t, true))
}

fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    cookie_value(headers, COOKIE)
}

impl FromRequestParts<WebState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, ApiError> {
        if let Some(a) = parts.extensions.get::<Authed>() {
            return Ok(a.clone());
        }
        let mut who = match parts.extensions.get::<CookieSession>() {
            // The guard already checked this request's cookie token.
            Some(CookieSession(a)) => a.clone(),
            None => {
                let (token, via_cookie) =
                    token_of(&parts.headers).ok_or(ApiError::Unauthenticated)?;
                let mut who = state.keys.verify(token)?;
                who.via_cookie = via_cookie;
                who
            }
        };
        // The stored role wins: a demoted or removed user loses access now,
        // and a session begun before the password was last set has ended.
        let standing = state
            .store
            .user_standing(&who.user)
            .await
            .map_err(ApiError::internal)?
            .ok_or(ApiError::Unauthenticated)?;
        if standing.stamp != who.stamp {
            return Err(ApiError::Unauthenticated);
        }
        who.role = standing.role;
        who.follower_of = crate::ops::follower_of(state);
        who.state_banner = crate::ops::state_banner(state);
        who.waiting_for_restart = state.engine.waiting_for_restart();
        parts.extensions.insert(who.clone());
        Ok(who)
    }
}

/// The cookie session the guard verified, handed to the [`Authed`]
/// extractor so the token is checked once per request.
#[derive(Clone)]
struct CookieSession(Authed);

// ------------------------------------------------------------------- roles

/// Who may call a route. Every route declares it once, in the table of
/// [`crate::routes`]; `enforce` checks it before the handler runs, so no
/// handler or operation checks a role itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a token: logging in, first-start setup, logout,
    /// static files, the OpenAPI document.
    Public,
    /// A logged-in user whose current role is this one or higher (viewer
    /// < operator < admin).
    AtLeast(Role),
}

impl Access {
    /// Its name in the OpenAPI document (`x-uagate-role`): `none` or the
    /// least role.
    pub fn name(self) -> &'static str {
        match self {
            Access::Public => "none",
            Access::AtLeast(role) => role.as_str(),
        }
    }
}

/// A request `enforce` refused, handed to the route's [`Refusal`].
pub struct Refused {
    /// The console's state.
    pub state: WebState,
    /// The caller, when the token was valid (and the role too low).
    pub who: Option<Authed>,
    /// Why: [`ApiError::Unauthenticated`], [`ApiError::Forbidden`], or an
    /// internal error looking the user up.
    pub error: ApiError,
    /// The request as it came (a page may show its posted form again).
    pub request: Request,
}

/// How a route answers a request `enforce` refused: the REST API with
/// the JSON error ([`Refusal::json`]), a console page with the login page
/// or the page around the error (see [`crate::pages::refusal`]).
#[derive(Clone)]
pub struct Refusal(Arc<dyn Fn(Refused) -> Answer + Send + Sync>);

/// The answer to a refused request, once computed.
type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

impl Refusal {
    /// The error as JSON with its status: 401 `unauthenticated`, 403
    /// `forbidden`.
    pub fn json() -> Refusal {
        Refusal::new(|r: Refused| async move { r.error.into_response() })
    }

    /// Answers a refused request with `answer`.
    pub fn new<F, Fut>(answer: F) -> Refusal
    where
        F: Fn(Refused) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response> + Send + 'static,
    {
        Refusal(Arc::new(move |r| Box::pin(answer(r))))
    }
}

/// `endpoint` (one route of [`crate::routes`]) behind [`enforce`] with
/// its access; a [`Access::Public`] route is left as it is.
pub(crate) fn require(
    endpoint: MethodRouter<WebState>,
    access: Access,
    state: &WebState,
    refusal: Refusal,
) -> MethodRouter<WebState> {
    match access {
        Access::Public => endpoint,
        Access::AtLeast(least) => endpoint.route_layer(axum::middleware::from_fn_with_state(
            Rule {
                state: state.clone(),
                least,
                refusal,
            },
            enforce,
        )),
    }
}

/// What [`enforce`] checks for one route.
#[derive(Clone)]
struct Rule {
    state: WebState,
    least: Role,
    refusal: Refusal,
}

/// Middleware on every route that needs a login, run before the handler
/// and any of its extractors: the caller must hold a valid token of a user
/// who still exists (else 401 `unauthenticated`), whose current role is
/// the route's least role or higher (else 403 `forbidden`). A refused
/// request is answered by the route's [`Refusal`]; an allowed one reaches
/// the handler, whose [`Authed`] is the one checked here (not looked up
/// again).
async fn enforce(State(rule): State<Rule>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let checked = match Authed::from_request_parts(&mut parts, &rule.state).await {
        Ok(who) => match allowed(&who, rule.least) {
            Ok(()) => Ok(()),
            Err(error) => Err((Some(who), error)),
        },
        Err(error) => Err((None, error)),
    };
    let request = Request::from_parts(parts, body);
    match checked {
        Ok(()) => next.run(request).await,
        Err((who, error)) => {
            (rule.refusal.0)(Refused {
                state: rule.state,
                who,
                error,
                request,
            })
            .await
        }
    }
}

/// The console's one role comparison: `who` may do what needs `least`
/// when their current role is that one or higher; otherwise 403 naming
/// their role.
fn allowed(who: &Authed, least: Role) -> Result<(), ApiError> {
    if who.can(least) {
        Ok(())
    } else {
        Err(ApiError::Forbidden {
            role: who.role.as_str(),
        })
    }
}

// ------------------------------------------------------------------- guard

/// Paths whose unsafe requests need no CSRF token (they carry no session:
/// logging in and first-start setup).
const CSRF_EXEMPT: &[&str] = &["/login", "/setup", "/api/v1/login", "/api/v1/setup"];

/// Largest form body the CSRF check reads to find the token.
const MAX_FORM: usize = 1 << 20;

/// Middleware on every console and API request:
/// - a state-changing request from a browser must come from the console's
///   own origin (`Origin` matches `Host`), and when it is authenticated by
///   the session cookie it must carry the session's CSRF token (header
///   [`CSRF_HEADER`], form field [`CSRF_FIELD`], or for file uploads the
///   query parameter of that name); otherwise 403 `csrf`. Bearer-token
///   callers carry no ambient credential and are exempt.
/// - an active cookie session past half its lifetime gets a renewed
///   cookie (not for periodic refreshes, see [`POLL_HEADER`]).
pub async fn guard(
    axum::extract::State(state): axum::extract::State<WebState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::Method;
    let unsafe_method = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if unsafe_method && !same_origin(&req) {
        let (mut parts, _) = req.into_parts();
        return csrf_refusal(&state, &mut parts, CsrfFault::OtherSite).await;
    }
    let bearer = req
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION);
    let session = if bearer {
        None
    } else {
        cookie_token(req.headers()).and_then(|t| state.keys.verify(t).ok())
    };
    let mut req = req;
    if let Some(who) = &session {
        req.extensions_mut()
            .insert(CookieSession(verified_session(who)));
        if unsafe_method && !CSRF_EXEMPT.contains(&req.uri().path()) {
            let mut seen = axum::http::Request::new(());
            *seen.method_mut() = req.method().clone();
            *seen.uri_mut() = req.uri().clone();
            *seen.headers_mut() = req.headers().clone();
            seen.extensions_mut()
                .insert(CookieSession(verified_session(who)));
            match csrf_ok(req, &who.csrf).await {
                Ok(r) => req = r,
                Err(Some(resp)) => return resp,
                Err(None) => {
                    let (mut parts, ()) = seen.into_parts();
                    return csrf_refusal(&state, &mut parts, CsrfFault::StaleForm).await;
                }
            }
        }
    }
    let poll = req.headers().contains_key(POLL_HEADER);
    // A page that showed the one-shot notice of a redirect clears it.
    let had_flash = !unsafe_method && !poll && cookie_value(req.headers(), FLASH).is_some();
    let mut resp = next.run(req).await;
    if had_flash && resp.status().is_success() {
        if let Ok(v) = axum::http::HeaderValue::from_str(&format!(
            "{}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0",
            FLASH
        )) {
            resp.headers_mut().append(axum::http::header::SET_COOKIE, v);
        }
    }
    if let Some(who) = session {
        let half = TOKEN_LIFETIME.as_secs() / 2;
        let renew = !poll
            && resp.status().is_success()
            && who.expires.saturating_sub(unix_now()) < half
            && !resp.headers().contains_key(axum::http::header::SET_COOKIE);
        if renew {
            if let Some(cookie) = state
                .keys
                .renew(&who)
                .and_then(|t| axum::http::HeaderValue::from_str(&session_cookie(&t)).ok())
            {
                resp.headers_mut()
                    .append(axum::http::header::SET_COOKIE, cookie);
            }
        }
    }
    resp
}

/// The session the guard verified from the cookie.
fn verified_session(who: &Authed) -> Authed {
    let mut verified = who.clone();
    verified.via_cookie = true;
    verified
}

/// Why a state-changing request failed the CSRF checks.
#[derive(Debug, Clone, Copy)]
enum CsrfFault {
    /// It came from another site (`Origin` is not the console).
    OtherSite,
    /// It carried no CSRF token or another session's: a form opened before
    /// the user last logged in (in this or another tab).
    StaleForm,
}

/// The answer to a request the CSRF checks refused: 403 `csrf` in JSON for
/// the REST API; for the browser console a page saying, in plain words,
/// that nothing was saved and what to do, with the way back to the page
/// the form was on.
async fn csrf_refusal(state: &WebState, parts: &mut Parts, fault: CsrfFault) -> Response {
    if crate::pages::is_api(parts.uri.path()) {
        return ApiError::Csrf.into_response();
    }
    let referer = parts
        .headers
        .get(axum::http::header::REFERER)
        .and_then(|v| v.to_str().ok())
        .map(crate::pages::path_of_url);
    let message = match fault {
        CsrfFault::OtherSite => {
            "This request came from another web site, so it was refused: nothing was changed."
        }
        CsrfFault::StaleForm => {
            "This form was opened before you last logged in, so it was not saved. Go back to \
             the page, reload it and enter it again."
        }
    };
    crate::pages::problem(
        state,
        parts,
        axum::http::StatusCode::FORBIDDEN,
        "Not saved",
        message.to_string(),
        crate::pages::back_to(referer.as_deref()),
    )
    .await
}

/// A browser's state-changing request must name the console itself as
/// its origin; requests without `Origin` (scripts) pass.
fn same_origin(req: &axum::extract::Request) -> bool {
    let Some(origin) = req.headers().get(axum::http::header::ORIGIN) else {
        return true;
    };
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    match (origin.to_str(), host) {
        (Ok(origin), Some(host)) => origin.strip_prefix("https://") == Some(host),
        _ => false,
    }
}

/// Checks the CSRF token of a cookie-authenticated request; a form body
/// is read (bounded) and put back. `Err(None)`: no token or a wrong one;
/// `Err(Some(answer))`: refused for another reason (a form too large).
async fn csrf_ok(
    req: axum::extract::Request,
    expected: &str,
) -> Result<axum::extract::Request, Option<axum::response::Response>> {
    let matches = |v: &str| constant_time_eq(v.as_bytes(), expected.as_bytes());
    if let Some(v) = req.headers().get(CSRF_HEADER) {
        return if v.to_str().is_ok_and(matches) {
            Ok(req)
        } else {
            Err(None)
        };
    }
    let content_type = req
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("application/x-www-form-urlencoded") {
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_FORM)
            .await
            .map_err(|_| Some(ApiError::invalid("body", "form too large").into_response()))?;
        let found = form_value(&bytes, CSRF_FIELD).is_some_and(|v| matches(&v));
        if !found {
            return Err(None);
        }
        return Ok(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ));
    }
    if content_type.starts_with("multipart/form-data") {
        let query = req.uri().query().unwrap_or("").as_bytes().to_vec();
        return if form_value(&query, CSRF_FIELD).is_some_and(|v| matches(&v)) {
            Ok(req)
        } else {
            Err(None)
        };
    }
    Err(None)
}

fn form_value(bytes: &[u8], name: &str) -> Option<String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
