//! The role check is in one place and enforced. Every route the router
//! serves is in `uagate_web::routes::table()` with the least role it has
//! always had (written out below, as in docs/console.md), and on every
//! route a lesser role gets the refusal it always got, 403, before the
//! handler runs: nothing changes, even for a request that would change
//! something were the role high enough. Without a session a REST call gets
//! 401 and a page the login page; the least role itself gets through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::Fixture;
use serde_json::{json, Value};
use uagate_web::access::Access;
use uagate_web::routes::{table, Kind, Route};

/// Every route with its least role (`none`: no token), as the handlers
/// checked it before the check moved into the router.
const ROLES: &[(&str, &str, &str)] = &[
    ("POST", "/api/v1/login", "none"),
    ("POST", "/api/v1/setup", "none"),
    ("POST", "/api/v1/logout", "viewer"),
    ("GET", "/api/v1/status", "viewer"),
    ("GET", "/api/v1/pair", "viewer"),
    ("GET", "/api/v1/plan", "viewer"),
    ("POST", "/api/v1/plan/preview", "viewer"),
    ("GET", "/api/v1/config", "viewer"),
    ("PUT", "/api/v1/config", "admin"),
    ("POST", "/api/v1/maintenance", "operator"),
    ("PUT", "/api/v1/service-level", "operator"),
    ("GET", "/api/v1/users", "admin"),
    ("POST", "/api/v1/users", "admin"),
    ("PUT", "/api/v1/users/{name}", "admin"),
    ("DELETE", "/api/v1/users/{name}", "admin"),
    ("GET", "/api/v1/audit", "admin"),
    ("GET", "/api/v1/owners", "viewer"),
    ("POST", "/api/v1/owners", "admin"),
    ("DELETE", "/api/v1/owners/{key}", "admin"),
    ("GET", "/api/v1/ingress", "viewer"),
    ("POST", "/api/v1/ingress", "admin"),
    ("DELETE", "/api/v1/ingress/{index}", "admin"),
    ("GET", "/api/v1/certificates", "viewer"),
    ("POST", "/api/v1/certificates", "operator"),
    ("DELETE", "/api/v1/certificates/{thumbprint}", "operator"),
    (
        "POST",
        "/api/v1/certificates/{thumbprint}/trust",
        "operator",
    ),
    ("GET", "/api/v1/crls", "viewer"),
    ("POST", "/api/v1/crls", "operator"),
    ("GET", "/api/v1/fields", "viewer"),
    ("POST", "/api/v1/fields", "operator"),
    ("POST", "/api/v1/field-test", "operator"),
    ("DELETE", "/api/v1/fields/{name}", "operator"),
    ("GET", "/api/v1/fields/{name}/history", "viewer"),
    ("POST", "/api/v1/fields/{name}/test", "operator"),
    ("POST", "/api/v1/fields/{name}/failover", "operator"),
    ("POST", "/api/v1/fields/{name}/reconnect", "operator"),
    ("GET", "/api/v1/sessions", "viewer"),
    ("DELETE", "/api/v1/sessions/{id}", "operator"),
    ("GET", "/api/v1/system", "viewer"),
    ("POST", "/api/v1/system/update", "admin"),
    ("POST", "/api/v1/system/reboot", "admin"),
    ("GET", "/api/v1/openapi.json", "none"),
    ("GET", "/metrics", "viewer"),
    ("GET", "/", "viewer"),
    ("GET", "/partials/dashboard", "viewer"),
    ("GET", "/login", "none"),
    ("POST", "/login", "none"),
    ("GET", "/setup", "none"),
    ("POST", "/setup", "none"),
    ("POST", "/logout", "none"),
    ("GET", "/limits", "viewer"),
    ("POST", "/limits", "admin"),
    ("POST", "/limits/preview", "viewer"),
    ("GET", "/owners", "viewer"),
    ("POST", "/owners", "admin"),
    ("POST", "/owners/remove", "admin"),
    ("POST", "/ingress", "admin"),
    ("POST", "/ingress/remove", "admin"),
    ("GET", "/service-level", "viewer"),
    ("POST", "/service-level", "operator"),
    ("POST", "/service-level/clear", "operator"),
    ("GET", "/maintenance", "viewer"),
    ("POST", "/maintenance", "operator"),
    ("GET", "/pair", "viewer"),
    ("POST", "/pair/invite", "admin"),
    ("POST", "/pair/join", "admin"),
    ("POST", "/pair/leave", "admin"),
    ("POST", "/pair/promote", "admin"),
    ("POST", "/pair/diverged/clear", "admin"),
    ("GET", "/certificates", "viewer"),
    ("POST", "/certificates/trust", "operator"),
    ("POST", "/certificates/remove", "operator"),
    ("POST", "/certificates/crl", "operator"),
    ("POST", "/certificates/upload", "operator"),
    ("GET", "/users", "admin"),
    ("POST", "/users", "admin"),
    ("POST", "/users/role", "admin"),
    ("POST", "/users/password", "admin"),
    ("POST", "/users/remove", "admin"),
    ("GET", "/audit", "admin"),
    ("GET", "/partials/usage", "viewer"),
    ("GET", "/audit.csv", "admin"),
    ("GET", "/fields", "viewer"),
    ("POST", "/fields", "operator"),
    ("GET", "/partials/fields", "viewer"),
    ("POST", "/fields/remove", "operator"),
    ("POST", "/fields/test", "operator"),
    ("POST", "/fields/check", "operator"),
    ("POST", "/fields/failover", "operator"),
    ("POST", "/fields/reconnect", "operator"),
    ("GET", "/sessions", "viewer"),
    ("POST", "/sessions/close", "operator"),
    ("GET", "/system", "viewer"),
    ("GET", "/partials/system", "viewer"),
    ("POST", "/system/update", "admin"),
    ("POST", "/system/reboot", "admin"),
    ("GET", "/static/htmx.min.js", "none"),
    ("GET", "/static/console.css", "none"),
    ("GET", "/static/favicon.svg", "none"),
    ("GET", "/favicon.ico", "none"),
    ("GET", "/static/console.js", "none"),
];

/// A route's path with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{key}", "plant")
        .replace("{index}", "0")
        .replace("{name}", "nobody")
        .replace("{thumbprint}", "00")
        .replace("{id}", "ns=1;i=5")
}

/// A request that would change something if the caller's role allowed it
/// (for the routes where one is easy to write), or an empty one.
fn body_for(route: &Route) -> (&'static str, String) {
    let form = "application/x-www-form-urlencoded";
    let json = "application/json";
    let text = |v: Value| v.to_string();
    match (route.method.as_str(), route.path) {
        ("PUT", "/api/v1/config") => (json, text(json!({"server": {"max_session_count": 7}}))),
        ("POST", "/api/v1/maintenance") => (json, text(json!({"state": "suspended"}))),
        ("PUT", "/api/v1/service-level") => (
            json,
            text(json!({"level": 150, "expires_in_s": 60, "reason": "x"})),
        ),
        ("POST", "/api/v1/users") => (
            json,
            text(
                json!({"username": "mallory", "password": "correct horse mallory", "role": "admin"}),
            ),
        ),
        ("PUT", "/api/v1/users/{name}") => (json, text(json!({"role": "admin"}))),
        ("POST", "/api/v1/owners") => (
            json,
            text(json!({"key": "plant", "ingress": ["10.0.0.0/8"]})),
        ),
        ("POST", "/api/v1/ingress") => (
            json,
            text(json!({"cidr": "10.1.0.0/16", "class": "bootstrap"})),
        ),
        ("POST", "/limits") => (
            form,
            "mode=balanced&default_weight=1&max_tracked_owners=4096&connection.capacity=77".into(),
        ),
        ("POST", "/owners") => (form, "key=plant&weight=2&ingress=10.0.0.0%2F8".into()),
        ("POST", "/ingress") => (form, "cidr=10.1.0.0%2F16&target=class%3Abootstrap".into()),
        ("POST", "/service-level") => (form, "level=150&expires_min=5&reason=x".into()),
        ("POST", "/maintenance") => (form, "state=suspended&confirm=yes".into()),
        ("POST", "/users") => (
            form,
            "username=mallory&password=correct+horse+mallory&role=admin".into(),
        ),
        ("POST", "/users/role") => (form, "name=viewer&role=admin".into()),
        ("POST", "/users/password") => (form, "name=admin&password=correct+horse+mallory".into()),
        ("POST", "/users/remove") => (form, "name=admin".into()),
        _ => empty(route),
    }
}

/// An empty request body of the kind the route takes.
fn empty(route: &Route) -> (&'static str, String) {
    match route.kind {
        Kind::Api => ("application/json", "null".into()),
        Kind::Page => ("application/x-www-form-urlencoded", String::new()),
    }
}

/// `route` as `user` (a fresh session of theirs), or without a session:
/// a Bearer token for the REST API, the session cookie and its CSRF token
/// for the console.
async fn request(
    f: &Fixture,
    route: &Route,
    user: Option<&str>,
    hx: bool,
    (content_type, body): (&str, String),
) -> Request<Body> {
    let mut b = Request::builder()
        .method(route.method.clone())
        .uri(concrete(route.path))
        .header(header::CONTENT_TYPE, content_type);
    if hx {
        b = b.header("hx-request", "true");
    }
    if let Some(user) = user {
        let role = uagate_web::auth::role_from_str(user).unwrap();
        let stamp = f
            .state
            .store
            .user_standing(user)
            .await
            .unwrap()
            .unwrap()
            .stamp;
        let token = f.state.keys.issue(user, role, &stamp).unwrap();
        let csrf = f.state.keys.verify(&token).unwrap().csrf;
        b = match route.kind {
            Kind::Api => b.header(header::AUTHORIZATION, format!("Bearer {token}")),
            Kind::Page => b
                .header(header::COOKIE, format!("uagate_token={token}"))
                .header("x-csrf-token", csrf),
        };
    }
    b.body(Body::from(body)).unwrap()
}

fn rank(role: &str) -> u8 {
    match role {
        "viewer" => 0,
        "operator" => 1,
        _ => 2,
    }
}

#[test]
fn every_route_has_the_least_role_it_always_had() {
    let mut declared: Vec<(String, &str, &str)> = table()
        .iter()
        .map(|r| (r.method.to_string(), r.path, r.access.name()))
        .collect();
    let mut expected: Vec<(String, &str, &str)> = ROLES
        .iter()
        .map(|(m, p, r)| (m.to_string(), *p, *r))
        .collect();
    declared.sort();
    expected.sort();
    assert_eq!(declared, expected);
}

#[tokio::test]
async fn a_lesser_role_is_refused_with_403_on_every_route_before_anything_changes() {
    let f = Fixture::start().await;
    let mut refused = 0;
    for route in table() {
        let Access::AtLeast(least) = route.access else {
            continue;
        };
        for user in ["viewer", "operator"] {
            if rank(user) >= rank(least.as_str()) {
                continue;
            }
            let what = format!("{} {} as {user}", route.method, route.path);
            let (s, body, h) = f
                .call(request(&f, &route, Some(user), false, body_for(&route)).await)
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{what}: {body}");
            let reason = format!("the {user} role may not do this");
            match route.kind {
                Kind::Api => {
                    assert_eq!(
                        body,
                        json!({"code": "forbidden", "message": reason}),
                        "{what}"
                    )
                }
                Kind::Page => {
                    assert!(
                        h[header::CONTENT_TYPE]
                            .to_str()
                            .unwrap()
                            .starts_with("text/html"),
                        "{what}"
                    );
                    assert!(body.as_str().unwrap().contains(&reason), "{what}: {body}");
                }
            }
            refused += 1;
        }
    }
    // Every operator route refused to a viewer, every admin route to both.
    let least = |role| ROLES.iter().filter(|r| r.2 == role).count();
    assert_eq!(refused, least("operator") + 2 * least("admin"));
    // Nothing was done: no user added, promoted, reset or removed; the
    // server state, the ServiceLevel and the configuration are untouched;
    // the audit trail holds only the fixture's three users.
    let users = f.state.store.list_users().await.unwrap();
    let users: Vec<(String, &str)> = users.into_iter().map(|(n, r)| (n, r.as_str())).collect();
    assert_eq!(
        users,
        [
            ("admin".to_string(), "admin"),
            ("operator".to_string(), "operator"),
            ("viewer".to_string(), "viewer")
        ]
    );
    assert!(f
        .state
        .store
        .verify_user("admin", "correct horse admin")
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        f.state.engine.server_state(),
        opcua_types::ServerState::Running
    );
    assert_eq!(
        f.state.engine.service_level_source().0.to_string(),
        "computed"
    );
    let log = f.state.store.change_log_since(0, 100).await.unwrap();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log.iter().all(|e| e.kind == "user.add"), "{log:?}");
    f.stop().await;
}

#[tokio::test]
async fn without_a_session_rest_calls_get_401_and_pages_the_login() {
    let f = Fixture::start().await;
    for route in table() {
        if route.access == Access::Public {
            continue;
        }
        let what = format!("{} {}", route.method, route.path);
        let (s, body, h) = f
            .call(request(&f, &route, None, false, empty(&route)).await)
            .await;
        match route.kind {
            Kind::Api => {
                assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {body}");
                assert_eq!(body["code"], "unauthenticated", "{what}");
            }
            Kind::Page => {
                assert_eq!(s, StatusCode::SEE_OTHER, "{what}: {body}");
                let to = h[header::LOCATION].to_str().unwrap();
                assert!(to.starts_with("/login?next=%2F"), "{what}: {to}");
                let (s, _, h) = f
                    .call(request(&f, &route, None, true, empty(&route)).await)
                    .await;
                assert_eq!(s, StatusCode::OK, "{what} from htmx");
                // An htmx request comes from a page opened with a session
                // (as does a form post): the login page says it expired.
                let expired = if to.ends_with("&expired=1") {
                    to.to_string()
                } else {
                    format!("{to}&expired=1")
                };
                assert_eq!(h["hx-redirect"], expired.as_str(), "{what} from htmx");
            }
        }
    }
    f.stop().await;
}

#[tokio::test]
async fn the_least_role_itself_gets_through_on_every_route() {
    let f = Fixture::start().await;
    for route in table() {
        let Access::AtLeast(least) = route.access else {
            continue;
        };
        let user = least.as_str();
        let what = format!("{} {} as {user}", route.method, route.path);
        // Empty bodies: harmless, and enough to see the router let it in.
        let (s, body, h) = f
            .call(request(&f, &route, Some(user), false, empty(&route)).await)
            .await;
        assert_ne!(s, StatusCode::UNAUTHORIZED, "{what}: {body}");
        assert!(
            !body.to_string().contains("may not do this"),
            "{what}: {s} {body}"
        );
        let to = h.get(header::LOCATION).map(|v| v.to_str().unwrap());
        assert!(!to.is_some_and(|to| to.starts_with("/login")), "{what}");
    }
    f.stop().await;
}
