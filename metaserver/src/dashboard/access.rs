//! Who may open the dashboard. Without a grid token, anyone who can reach its address (by
//! default loopback only). With one, as Jupyter does: the link `ninf up` prints carries
//! `?token=...`; opening it sets a cookie (HttpOnly, SameSite=Strict) and redirects to the
//! same page without the token in the address; later requests carry the cookie, or an
//! `Authorization: Bearer` header (scripts).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use ninf_proto::net::auth::CheckToken;

/// The cookie that carries the token.
pub const COOKIE: &str = "ninf_token";

/// What to do with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Access {
    /// Serve it.
    Allowed,
    /// A right token in the address: set the cookie and send the browser to `location`.
    SetCookie { location: String },
    /// Refuse it, saying why.
    Refused(&'static str),
}

/// Decides on a request for `path` with `query`, given its cookie token and its
/// `authorization` header.
pub fn decide(
    check: &CheckToken,
    path: &str,
    query: Option<&str>,
    cookie: Option<&str>,
    authorization: Option<&str>,
) -> Access {
    if check.is_open() {
        return Access::Allowed;
    }
    let bearer = |token: &str| format!("Bearer {token}");
    let accepted = |value: &str| check.verify(Some(value.as_bytes()), "dashboard").is_ok();
    if let Some(token) = query.and_then(token_in_query) {
        if !accepted(&bearer(&token)) {
            return Access::Refused("the token in the address is not the grid's");
        }
        let rest: Vec<&str> = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.starts_with("token="))
            .collect();
        let location = if rest.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{}", rest.join("&"))
        };
        return Access::SetCookie { location };
    }
    if cookie.is_some_and(|c| accepted(&bearer(c))) || authorization.is_some_and(accepted) {
        return Access::Allowed;
    }
    Access::Refused(
        "this grid's dashboard needs its token: open the link `ninf up` printed (it ends in ?token=...)",
    )
}

fn token_in_query(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|p| p.strip_prefix("token="))
        // Tokens are hex, but a browser may still escape what it is given.
        .map(|t| {
            percent_encoding::percent_decode_str(t)
                .decode_utf8_lossy()
                .into_owned()
        })
}

/// The token in a `Cookie` header, if it has ours.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
}

/// The token check and whether the dashboard is served over HTTPS (the cookie is then
/// `Secure`).
#[derive(Clone)]
pub struct Guard {
    pub check: CheckToken,
    pub https: bool,
}

/// The middleware in front of every page and API route.
pub async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let cookie = cookie_token(headers);
    let uri = request.uri();
    match decide(
        &guard.check,
        uri.path(),
        uri.query(),
        cookie.as_deref(),
        authorization,
    ) {
        Access::Allowed => next.run(request).await,
        Access::SetCookie { location } => {
            let token = uri.query().and_then(token_in_query).unwrap_or_default();
            let secure = if guard.https { "; Secure" } else { "" };
            let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
            ([(header::SET_COOKIE, cookie)], Redirect::to(&location)).into_response()
        }
        Access::Refused(why) => (StatusCode::UNAUTHORIZED, why).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_grid_lets_everyone_in() {
        let open = CheckToken::new("dashboard", None);
        assert_eq!(decide(&open, "/", None, None, None), Access::Allowed);
    }

    #[test]
    fn the_token_in_the_address_becomes_a_cookie_and_leaves_the_address() {
        let check = CheckToken::new("dashboard", Some("c0ffee"));
        assert_eq!(
            decide(&check, "/graphs", Some("token=c0ffee"), None, None),
            Access::SetCookie {
                location: "/graphs".into()
            }
        );
        assert_eq!(
            decide(&check, "/", Some("page=gang&token=c0%66fee"), None, None),
            Access::SetCookie {
                location: "/?page=gang".into()
            },
            "other parameters stay; an escaped token is decoded"
        );
        assert!(matches!(
            decide(&check, "/", Some("token=bad"), None, None),
            Access::Refused(_)
        ));
    }

    #[test]
    fn later_requests_need_the_cookie_or_a_bearer_header() {
        let check = CheckToken::new("dashboard", Some("c0ffee"));
        assert_eq!(
            decide(&check, "/api/overview", None, Some("c0ffee"), None),
            Access::Allowed
        );
        assert_eq!(
            decide(&check, "/api/overview", None, None, Some("Bearer c0ffee")),
            Access::Allowed
        );
        let Access::Refused(why) = decide(&check, "/", None, Some("stale"), None) else {
            panic!("a wrong cookie must be refused");
        };
        assert!(why.contains("?token="), "{why}");
        assert!(matches!(
            decide(&check, "/", None, None, None),
            Access::Refused(_)
        ));
    }
}
