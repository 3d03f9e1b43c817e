//! The one masking of a connection URL's password, for every message that shows a URL
//! (the relay's config errors re-export it).

/// Replaces the password of a URL by `***`, whatever shape the URL has.
///
/// The userinfo is everything before the URL's last `@` (after `scheme://` when there is one);
/// its user is the text before the userinfo's first `:`, and the rest is the password. So a
/// password with `/`, `?` or `@` in it, and the malformed shapes an operator types by mistake
/// (`relay:pw@db:3306`, `mysql:/relay:pw@db`), are masked too: a URL this function cannot parse
/// is masked more, never less. A URL without `@` has no password to mask.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (&url[..scheme.len() + 3], rest),
        None => ("", url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31 item 1: the shapes an operator types by mistake, and passwords with the URL's
    /// own delimiters in them, never show the password.
    #[test]
    fn every_url_shape_hides_its_password() {
        for (url, shown) in [
            (
                "mysql://repl:s3cret@db:3306/x",
                "mysql://repl:***@db:3306/x",
            ),
            ("relay:S3cr3t@127.0.0.1:3306", "relay:***@127.0.0.1:3306"),
            (
                "mysql:/relay:S3cr3t@127.0.0.1:3306",
                "mysql:***@127.0.0.1:3306",
            ),
            ("mysql//relay:S3cr3t@db", "mysql//relay:***@db"),
            ("mysql://relay:S3/cr3t@db:3306", "mysql://relay:***@db:3306"),
            (
                "mysql://relay:S3cr3t?x@db:3306/x",
                "mysql://relay:***@db:3306/x",
            ),
            ("mysql://relay:S3@cr3t@db", "mysql://relay:***@db"),
            ("mysql://relay:S3cr3t@", "mysql://relay:***@"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        for unchanged in ["db:3306", "mysql://db:3306/x", "mysql://repl@db:3306"] {
            assert_eq!(redact_url(unchanged), unchanged);
        }
    }
}
