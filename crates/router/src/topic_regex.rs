//! Debezium's `route.topic.regex` + `route.topic.replacement` (Kafka Connect's
//! `RegexRouter`): the routed-by value (the aggregate type) becomes the topic; when the
//! regex matches it **as a whole** (Java's `Matcher.matches()`), the topic is the
//! replacement with its group references filled in; otherwise the value itself.
//!
//! The replacement uses Java's syntax: `${name}` and `$n` refer to groups, `\x` is a
//! literal `x`; any other `$` is a configuration error (Java throws at the first record).
//! The regex is Rust's `regex` syntax, which accepts the usual Java patterns (named
//! groups `(?<name>...)`, classes, quantifiers) but not look-around or backreferences.

use regex::Regex;

/// A compiled regex router.
#[derive(Debug, Clone)]
pub(crate) struct TopicRegex {
    /// The pattern anchored at both ends (full match).
    regex: Regex,
    /// The replacement in `regex`'s expansion syntax (`${name}`, `$$`).
    expansion: String,
}

impl TopicRegex {
    /// Compiles `pattern` and translates `replacement`; the error says what is wrong.
    pub(crate) fn new(pattern: &str, replacement: &str) -> Result<TopicRegex, String> {
        let regex = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|error| format!("the regex does not compile: {error}"))?;
        let mut expansion = String::with_capacity(replacement.len() + 8);
        let mut characters = replacement.chars().peekable();
        while let Some(character) = characters.next() {
            match character {
                '\\' => match characters.next() {
                    Some('$') => expansion.push_str("$$"),
                    Some(other) => expansion.push(other),
                    None => return Err("the replacement ends with a lone `\\`".to_string()),
                },
                '$' => {
                    let name: String = if characters.peek() == Some(&'{') {
                        characters.next();
                        let name: String = characters.by_ref().take_while(|c| *c != '}').collect();
                        if name.is_empty() {
                            return Err("the replacement has an empty `${}`".to_string());
                        }
                        name
                    } else {
                        let mut digits = String::new();
                        while let Some(digit) = characters.peek().filter(|c| c.is_ascii_digit()) {
                            digits.push(*digit);
                            characters.next();
                        }
                        if digits.is_empty() {
                            return Err("the replacement has a `$` that names no group (write `\\$` for a literal `$`)".to_string());
                        }
                        digits
                    };
                    let known = match name.parse::<usize>() {
                        Ok(number) => number < regex.captures_len(),
                        Err(_) => regex.capture_names().flatten().any(|group| group == name),
                    };
                    if !known {
                        return Err(format!("the replacement refers to group `{name}`, which the regex does not have"));
                    }
                    expansion.push_str("${");
                    expansion.push_str(&name);
                    expansion.push('}');
                }
                other => expansion.push(other),
            }
        }
        Ok(TopicRegex { regex, expansion })
    }

    /// The topic for a routed-by value.
    pub(crate) fn route(&self, routed_by: &str) -> String {
        match self.regex.captures(routed_by) {
            Some(captures) => {
                let mut topic = String::new();
                captures.expand(&self.expansion, &mut topic);
                topic
            }
            None => routed_by.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debezium_default_and_full_match() {
        let default =
            TopicRegex::new("(?<routedByValue>.*)", "outbox.event.${routedByValue}").unwrap();
        assert_eq!(default.route("order"), "outbox.event.order");
        let partial = TopicRegex::new("ord", "orders").unwrap();
        // `matches()` is a full match: `order` does not match `ord`, so the value stays.
        assert_eq!(partial.route("order"), "order");
        assert_eq!(partial.route("ord"), "orders");
        let numbered = TopicRegex::new("(\\w+)-(\\w+)", "t.$2.$1.\\$x").unwrap();
        assert_eq!(numbered.route("eu-order"), "t.order.eu.$x");
        assert_eq!(numbered.route("plain"), "plain");
    }

    #[test]
    fn bad_replacements_are_refused() {
        assert!(TopicRegex::new("(?<a>.*)", "x.${b}").is_err());
        assert!(TopicRegex::new("(.*)", "x.$2").is_err());
        assert!(TopicRegex::new("(.*)", "x.$").is_err());
        assert!(TopicRegex::new("(", "x").is_err());
    }
}
