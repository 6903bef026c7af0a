//! Users (`/users`, admin): the users and their roles; add, change role,
//! reset password, remove.

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use uagate_store::Role;

use super::{done, error_page, page, take_flash, Chrome, NameForm};
use crate::auth::Authed;
use crate::error::ApiError;
use crate::state::WebState;

#[derive(Template)]
#[template(path = "users.html")]
struct UsersPage {
    chrome: Chrome,
    users: Vec<(String, &'static str)>,
    roles: [&'static str; 3],
    /// The add form's name and role: as entered when it was refused.
    new_name: String,
    new_role: String,
}

async fn render_users(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
) -> Response {
    render_entered(
        state,
        who,
        flash,
        error,
        (String::new(), "viewer".to_string()),
    )
    .await
}

/// The page with the add form showing `(name, role)` (what a refused add
/// entered; the password is never shown again). A refused input is named
/// by its label in the message above the page.
async fn render_entered(
    state: &WebState,
    who: &Authed,
    flash: Option<String>,
    error: Option<ApiError>,
    (new_name, new_role): (String, String),
) -> Response {
    let error = error.map(|e| match e {
        ApiError::Invalid {
            field: Some(field),
            message,
        } => {
            let label = match field.as_str() {
                "password" => "Password: ",
                "username" | "name" => "Name: ",
                "role" => "Role: ",
                _ => "",
            };
            ApiError::Invalid {
                message: format!("{label}{message}"),
                field: Some(field),
            }
        }
        other => other,
    });
    let users = match state.store.list_users().await {
        Ok(u) => u.into_iter().map(|(n, r)| (n, r.as_str())).collect(),
        Err(e) => return error_page(e.into()),
    };
    let (chrome, status) = Chrome::with_error(who, "Users", "/users", flash, error);
    page(
        &UsersPage {
            chrome,
            users,
            roles: ["viewer", "operator", "admin"],
            new_name,
            new_role,
        },
        status,
    )
}

/// `GET /users`.
pub async fn show(State(state): State<WebState>, who: Authed, headers: HeaderMap) -> Response {
    let flash = take_flash(&headers);
    render_users(&state, &who, flash, None).await
}

/// `POST /users` form.
#[derive(Debug, Deserialize)]
pub struct NewUserForm {
    username: String,
    password: String,
    role: String,
}

fn role_field(s: &str) -> Result<Role, ApiError> {
    crate::auth::role_from_str(s)
        .ok_or_else(|| ApiError::invalid("role", "one of viewer, operator, admin"))
}

/// `POST /users`.
pub async fn add(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NewUserForm>,
) -> Response {
    let result = async {
        let role = role_field(&f.role)?;
        state
            .store
            .add_user(&who.user, &f.username, &f.password, role)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(name) => done("/users", &format!("User {name} added.")),
        Err(e) => render_entered(&state, &who, None, Some(e), (f.username, f.role)).await,
    }
}

/// Whether `name` (in any case) is the logged-in user.
fn is_self(who: &Authed, name: &str) -> bool {
    uagate_store::user_key(name) == uagate_store::user_key(&who.user)
}

/// `POST /users/role` form.
#[derive(Debug, Deserialize)]
pub struct RoleForm {
    name: String,
    role: String,
}

/// `POST /users/role`.
pub async fn role(State(state): State<WebState>, who: Authed, Form(f): Form<RoleForm>) -> Response {
    let result = async {
        let role = role_field(&f.role)?;
        // The same role again changes nothing, and is not audited as a change.
        let key = uagate_store::user_key(&f.name);
        let now = state.store.list_users().await?;
        if now
            .iter()
            .any(|(n, r)| uagate_store::user_key(n) == key && *r == role)
        {
            return Ok(false);
        }
        state
            .store
            .set_role(&who.user, &f.name, role)
            .await
            .map_err(ApiError::from)?;
        Ok(true)
    }
    .await;
    match result {
        Ok(false) => done(
            "/users",
            &format!("{} is already {}: nothing changed.", f.name, f.role),
        ),
        // One's own role below admin: this page is no longer one's own.
        Ok(true) if is_self(&who, &f.name) && f.role != "admin" => done(
            "/",
            &format!(
                "You are now {}: users are managed by an administrator.",
                f.role
            ),
        ),
        Ok(true) => done("/users", &format!("{} is now {}.", f.name, f.role)),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

/// `POST /users/password` form.
#[derive(Debug, Deserialize)]
pub struct PasswordForm {
    name: String,
    password: String,
}

/// `POST /users/password`.
pub async fn password(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<PasswordForm>,
) -> Response {
    let result = async {
        state
            .store
            .set_password(&who.user, &f.name, &f.password)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        // One's own password: this session has ended with it.
        Ok(()) if is_self(&who, &f.name) => done(
            "/login",
            "Your password was changed, which ended your sessions: log in with the new one.",
        ),
        Ok(()) => done(
            "/users",
            &format!(
                "Password of {} reset: their open sessions have ended.",
                f.name
            ),
        ),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}

/// `POST /users/remove`.
pub async fn remove(
    State(state): State<WebState>,
    who: Authed,
    Form(f): Form<NameForm>,
) -> Response {
    let result = async {
        state
            .store
            .delete_user(&who.user, &f.name)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match result {
        Ok(()) if is_self(&who, &f.name) => done(
            "/login",
            "You removed your own user, which ended your sessions: log in as another user.",
        ),
        Ok(()) => done(
            "/users",
            &format!("User {} removed: their open sessions have ended.", f.name),
        ),
        Err(e) => render_users(&state, &who, None, Some(e)).await,
    }
}
