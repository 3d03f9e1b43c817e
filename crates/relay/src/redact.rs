//! Masking of the secrets a config holds, in any text an operator sees: error messages, the
//! TOML parser's excerpt of a config line, `check` and `status` lines.
//!
//! Two functions, used everywhere such text is made:
//! * [`redact_url`]: one URL (`source.url`, `checkpoint.url`), its password as `***`;
//! * [`redact_secrets`]: free text; every URL-like word with a password in it goes through
//!   [`redact_url`], and the value after `key =` (also `` `key` = `value` `` and
//!   `"key" = "value"`) of a key that holds a secret ([`is_secret_key`]) becomes `***`.
//!
//! Both mask more rather than less: a shape they cannot parse is masked whole.

use outbox_kafka::security::is_secret_property;

pub use outbox_binlog::redact_url;

/// True for a config key (relay key or librdkafka property) whose value is a secret:
/// `sasl_password`, `ssl.key.password`, `sasl.oauthbearer.client.secret`, `*token*`, ...
/// Keys that name where a secret is (`*_file`, `*_env`, `*.location`) are not secrets.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let names_a_place =
        key.ends_with("_file") || key.ends_with("_env") || key.ends_with(".location");
    !names_a_place && is_secret_property(&key)
}

/// `text` with every secret in it masked (see the module docs).
pub fn redact_secrets(text: &str) -> String {
    text.split_inclusive('\n')
        .map(|line| redact_url_words(&redact_secret_values(line)))
        .collect()
}

/// Characters that end a word in [`redact_url_words`] (a URL has none of them unencoded).
fn ends_word(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | ',' | '(' | ')' | '[' | ']' | '{' | '}'
        )
}

/// Every word of `line` with `:` before an `@` (a URL or `user:password@host`) through
/// [`redact_url`].
fn redact_url_words(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while !rest.is_empty() {
        let word_end = rest.find(ends_word).unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_end);
        let has_password = word
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(':'));
        if has_password {
            out.push_str(&redact_url(word));
        } else {
            out.push_str(word);
        }
        let delimiter_len = after.chars().next().map_or(0, char::len_utf8);
        out.push_str(&after[..delimiter_len]);
        rest = &after[delimiter_len..];
    }
    out
}

/// `line` with the value after each `key =` masked when [`is_secret_key`] says the key holds
/// a secret. A quoted value is masked up to its closing quote (or the line's end, for an
/// unclosed one); a bare value up to the next `,`, `}` or blank.
fn redact_secret_values(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(equals) = rest.find('=') {
        let (before, after) = rest.split_at(equals + 1);
        out.push_str(before);
        rest = after;
        if !is_secret_key(key_before(&before[..equals])) {
            continue;
        }
        let value_start = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..value_start]);
        let value = &rest[value_start..];
        let value_end = match value.chars().next() {
            Some(quote @ ('"' | '\'' | '`')) => match value[1..].find(quote) {
                Some(close) => close + 2,
                None => value.trim_end_matches(['\r', '\n']).len(),
            },
            _ => value
                .find(|c: char| c.is_whitespace() || c == ',' || c == '}')
                .unwrap_or(value.len()),
        };
        match value.chars().next() {
            Some(quote @ ('"' | '\'' | '`')) => {
                out.push(quote);
                out.push_str("***");
                if value_end > 1 && value[..value_end].ends_with(quote) {
                    out.push(quote);
                }
            }
            _ if value_end > 0 => out.push_str("***"),
            _ => {}
        }
        rest = &value[value_end..];
    }
    out.push_str(rest);
    out
}

/// The key a `key =` assignment ends with in `text` (the text before the `=`): quotes,
/// backticks and blanks before the `=` are skipped.
fn key_before(text: &str) -> &str {
    let text = text.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'));
    let start = text
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        .map_or(0, |i| i + 1);
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_and_url_passwords_are_masked_in_text() {
        for (text, shown) in [
            (
                "2 | url = \"mysql://relay:S3cr3t@127.0.0.1:3306\n",
                "2 | url = \"mysql://relay:***@127.0.0.1:3306\n",
            ),
            (
                "`relay:S3cr3t@db:3306` must start with `mysql://`",
                "`relay:***@db:3306` must start with `mysql://`",
            ),
            (
                "\"sasl.oauthbearer.client.secret\" = \"S3cr3t",
                "\"sasl.oauthbearer.client.secret\" = \"***",
            ),
            (
                "bad (`sasl.oauthbearer.client.secret` = `S3cr3t`)",
                "bad (`sasl.oauthbearer.client.secret` = `***`)",
            ),
            (
                "security = { sasl_password = \"S3cr3t\", sasl_username = \"u\" }",
                "security = { sasl_password = \"***\", sasl_username = \"u\" }",
            ),
            ("ssl.key.password=S3cr3t, x=1", "ssl.key.password=***, x=1"),
        ] {
            assert_eq!(redact_secrets(text), shown, "{text}");
        }
        for unchanged in [
            "sasl_password_file = \"/run/secrets/kafka\"",
            "store = \"file\" and a@b and a == b =",
            "ssl.key.location = \"/etc/key.pem\"",
        ] {
            assert_eq!(redact_secrets(unchanged), unchanged);
        }
    }
}
