//! Topic templates (`outbox.event.${aggregate_type}`) and Kafka topic name rules.
//!
//! # Contract
//! A template is parsed once, at configuration time: unknown placeholders, an unterminated
//! `${`, or literal text that can never be part of a legal topic name are configuration
//! errors. Rendering never fails; the rendered name is then checked with
//! [`check_topic_name`] and a bad name becomes a routing error. Names are never mangled.

use std::fmt;

/// The longest legal Kafka topic name, in bytes (Kafka's `Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// Why a string is not a legal Kafka topic name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicNameProblem {
    /// Kafka rejects empty topic names.
    #[error("the topic name is empty")]
    Empty,
    /// Kafka rejects names longer than 249 characters.
    #[error("the topic name is {length} characters long, the limit is 249")]
    TooLong {
        /// Length of the rejected name in bytes.
        length: usize,
    },
    /// Kafka only allows ASCII letters, digits, `.`, `_` and `-`.
    #[error(
        "the topic name contains {character:?}; only a-z, A-Z, 0-9, '.', '_' and '-' are allowed"
    )]
    IllegalCharacter {
        /// The first offending character.
        character: char,
    },
    /// `.` and `..` are reserved by Kafka.
    #[error("the topic name may not be \".\" or \"..\"")]
    DotOrDotDot,
}

/// True for the characters Kafka allows in topic names: `[a-zA-Z0-9._-]`.
const fn is_legal_topic_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '.' | '_' | '-')
}

/// [`is_legal_topic_character`] per byte: every legal character is a single ASCII byte, so
/// a name is legal exactly when each of its bytes is (a table lookup per byte, no UTF-8
/// decoding per character; the router checks every rendered topic).
const LEGAL_TOPIC_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = is_legal_topic_character(byte as u8 as char);
        byte += 1;
    }
    table
};

/// Checks `name` against Kafka's topic name rules: charset `[a-zA-Z0-9._-]`, length
/// 1..=249, not `.` or `..`.
pub fn check_topic_name(name: &str) -> Result<(), TopicNameProblem> {
    if name.is_empty() {
        return Err(TopicNameProblem::Empty);
    }
    if let Some(position) = name
        .as_bytes()
        .iter()
        .position(|byte| !LEGAL_TOPIC_BYTES[usize::from(*byte)])
    {
        // The bytes before it are legal, so ASCII, so whole characters: the first illegal
        // byte starts the first illegal character.
        let character = name
            .get(position..)
            .and_then(|rest| rest.chars().next())
            .unwrap_or(char::REPLACEMENT_CHARACTER);
        return Err(TopicNameProblem::IllegalCharacter { character });
    }
    if name.len() > MAX_TOPIC_NAME_LENGTH {
        return Err(TopicNameProblem::TooLong { length: name.len() });
    }
    if name == "." || name == ".." {
        return Err(TopicNameProblem::DotOrDotDot);
    }
    Ok(())
}

/// A value a topic template can insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicPlaceholder {
    /// `${aggregate_type}`: the row's aggregate type column, rendered as text. Debezium's
    /// spelling `${routedByValue}` is accepted too, so Debezium topic settings carry over.
    AggregateType,
    /// `${event_type}`: the row's event type column, rendered as text.
    EventType,
    /// `${table}`: the outbox table's name (without the database).
    Table,
    /// `${database}`: the outbox table's database (schema).
    Database,
}

impl TopicPlaceholder {
    /// Every placeholder, for error messages.
    pub const ALL: [TopicPlaceholder; 4] = [
        TopicPlaceholder::AggregateType,
        TopicPlaceholder::EventType,
        TopicPlaceholder::Table,
        TopicPlaceholder::Database,
    ];

    /// The name written between `${` and `}`.
    pub fn name(self) -> &'static str {
        match self {
            TopicPlaceholder::AggregateType => "aggregate_type",
            TopicPlaceholder::EventType => "event_type",
            TopicPlaceholder::Table => "table",
            TopicPlaceholder::Database => "database",
        }
    }

    /// The placeholder called `name`, if there is one.
    fn from_name(name: &str) -> Option<Self> {
        if name == "routedByValue" {
            return Some(TopicPlaceholder::AggregateType);
        }
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for TopicPlaceholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${{{}}}", self.name())
    }
}

/// Why a topic template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicTemplateProblem {
    /// An empty template would render an empty (illegal) topic name.
    #[error("the template is empty")]
    Empty,
    /// `${name}` with a name the router does not know.
    #[error("unknown placeholder `${{{name}}}`; known placeholders are ${{aggregate_type}}, ${{event_type}}, ${{table}} and ${{database}}")]
    UnknownPlaceholder {
        /// The name between the braces.
        name: String,
    },
    /// A `${` without its closing `}`.
    #[error("`${{` at byte {offset} is never closed with `}}`")]
    Unterminated {
        /// Byte offset of the `$`.
        offset: usize,
    },
    /// Literal text that no legal topic name may contain.
    #[error("the literal text contains {character:?}; topic names only allow a-z, A-Z, 0-9, '.', '_' and '-'")]
    IllegalCharacter {
        /// The first offending character.
        character: char,
    },
    /// A template without placeholders whose text is not a legal topic name.
    #[error("{0}")]
    IllegalLiteralTopic(TopicNameProblem),
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TemplatePart {
    /// Text copied as is.
    Literal(String),
    /// A value inserted at routing time.
    Placeholder(TopicPlaceholder),
}

/// A parsed topic template such as `outbox.event.${aggregate_type}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    /// The pieces in order; adjacent literals are merged.
    parts: Vec<TemplatePart>,
    /// Sum of the literal lengths, to size the output string once.
    literal_length: usize,
}

/// The values a template's placeholders are replaced with, for one row.
#[derive(Debug, Clone, Copy)]
pub struct TopicValues<'a> {
    /// Value for `${aggregate_type}`.
    pub aggregate_type: &'a str,
    /// Value for `${event_type}`.
    pub event_type: &'a str,
    /// Value for `${table}`.
    pub table: &'a str,
    /// Value for `${database}`.
    pub database: &'a str,
}

impl TopicTemplate {
    /// Parses a template. `${name}` inserts a placeholder (see [`TopicPlaceholder`]); every
    /// other character is literal and must be legal in a topic name.
    pub fn parse(template: &str) -> Result<Self, TopicTemplateProblem> {
        if template.is_empty() {
            return Err(TopicTemplateProblem::Empty);
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut literal_length = 0;
        let mut rest = template;
        let mut offset = 0;
        while !rest.is_empty() {
            if let Some(after_open) = rest.strip_prefix("${") {
                let Some(close) = after_open.find('}') else {
                    return Err(TopicTemplateProblem::Unterminated { offset });
                };
                let name = &after_open[..close];
                let placeholder = TopicPlaceholder::from_name(name).ok_or_else(|| {
                    TopicTemplateProblem::UnknownPlaceholder {
                        name: name.to_string(),
                    }
                })?;
                if !literal.is_empty() {
                    literal_length += literal.len();
                    parts.push(TemplatePart::Literal(std::mem::take(&mut literal)));
                }
                parts.push(TemplatePart::Placeholder(placeholder));
                let consumed = 2 + close + 1;
                rest = &rest[consumed..];
                offset += consumed;
            } else {
                let mut chars = rest.chars();
                let character = chars.next().unwrap_or_default();
                if !is_legal_topic_character(character) {
                    return Err(TopicTemplateProblem::IllegalCharacter { character });
                }
                literal.push(character);
                rest = chars.as_str();
                offset += character.len_utf8();
            }
        }
        if !literal.is_empty() {
            literal_length += literal.len();
            parts.push(TemplatePart::Literal(literal));
        }
        let template = TopicTemplate {
            parts,
            literal_length,
        };
        if let Some(literal_topic) = template.as_literal() {
            check_topic_name(literal_topic).map_err(TopicTemplateProblem::IllegalLiteralTopic)?;
        } else if template.literal_length > MAX_TOPIC_NAME_LENGTH {
            return Err(TopicTemplateProblem::IllegalLiteralTopic(
                TopicNameProblem::TooLong {
                    length: template.literal_length,
                },
            ));
        }
        Ok(template)
    }

    /// The topic name when the template has no placeholders; always a legal topic name
    /// ([`TopicTemplate::parse`] refuses the template otherwise).
    pub fn as_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [TemplatePart::Literal(text)] => Some(text),
            _ => None,
        }
    }

    /// True when the template uses `placeholder`.
    pub fn uses(&self, placeholder: TopicPlaceholder) -> bool {
        self.parts.contains(&TemplatePart::Placeholder(placeholder))
    }

    /// Renders the template for one row. The result is not checked; see [`check_topic_name`].
    pub fn render(&self, values: &TopicValues<'_>) -> String {
        let mut topic = String::with_capacity(self.literal_length + 16);
        for part in &self.parts {
            match part {
                TemplatePart::Literal(text) => topic.push_str(text),
                TemplatePart::Placeholder(placeholder) => topic.push_str(match placeholder {
                    TopicPlaceholder::AggregateType => values.aggregate_type,
                    TopicPlaceholder::EventType => values.event_type,
                    TopicPlaceholder::Table => values.table,
                    TopicPlaceholder::Database => values.database,
                }),
            }
        }
        topic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> TopicValues<'static> {
        TopicValues {
            aggregate_type: "order",
            event_type: "OrderCreated",
            table: "outbox",
            database: "shop",
        }
    }

    #[test]
    fn renders_every_placeholder() {
        let template =
            TopicTemplate::parse("${database}.${table}.${aggregate_type}-${event_type}").unwrap();
        assert_eq!(template.render(&values()), "shop.outbox.order-OrderCreated");
        assert!(template.uses(TopicPlaceholder::EventType));
    }

    #[test]
    fn debezium_placeholder_spelling() {
        let template = TopicTemplate::parse("outbox.event.${routedByValue}").unwrap();
        assert_eq!(template.render(&values()), "outbox.event.order");
        assert!(template.uses(TopicPlaceholder::AggregateType));
    }

    #[test]
    fn literal_template_is_checked_at_parse_time() {
        assert_eq!(
            TopicTemplate::parse("..").unwrap_err(),
            TopicTemplateProblem::IllegalLiteralTopic(TopicNameProblem::DotOrDotDot)
        );
        assert_eq!(
            TopicTemplate::parse("orders").unwrap().as_literal(),
            Some("orders")
        );
    }

    #[test]
    fn template_problems() {
        let cases = [
            ("", TopicTemplateProblem::Empty),
            (
                "a.${nope}",
                TopicTemplateProblem::UnknownPlaceholder {
                    name: "nope".into(),
                },
            ),
            (
                "a.${aggregate_type",
                TopicTemplateProblem::Unterminated { offset: 2 },
            ),
            (
                "a b${table}",
                TopicTemplateProblem::IllegalCharacter { character: ' ' },
            ),
            (
                "$table",
                TopicTemplateProblem::IllegalCharacter { character: '$' },
            ),
        ];
        for (template, problem) in cases {
            assert_eq!(
                TopicTemplate::parse(template).unwrap_err(),
                problem,
                "{template}"
            );
        }
        let long = format!("{}${{table}}", "a".repeat(250));
        assert!(matches!(
            TopicTemplate::parse(&long).unwrap_err(),
            TopicTemplateProblem::IllegalLiteralTopic(TopicNameProblem::TooLong { length: 250 })
        ));
    }

    /// The rules as written, one character at a time (what `check_topic_name` did before
    /// it checked bytes).
    fn reference_check(name: &str) -> Result<(), TopicNameProblem> {
        if name.is_empty() {
            return Err(TopicNameProblem::Empty);
        }
        if let Some(character) = name.chars().find(|c| !is_legal_topic_character(*c)) {
            return Err(TopicNameProblem::IllegalCharacter { character });
        }
        if name.len() > MAX_TOPIC_NAME_LENGTH {
            return Err(TopicNameProblem::TooLong { length: name.len() });
        }
        if name == "." || name == ".." {
            return Err(TopicNameProblem::DotOrDotDot);
        }
        Ok(())
    }

    proptest::proptest! {
        /// Any string, legal characters or not, ASCII or not, long or short: the same
        /// verdict (and the same first illegal character) as the rules as written.
        #[test]
        fn the_byte_table_check_agrees_with_the_rules(
            name in "([a-zA-Z0-9._-]{0,40}|.{0,3}|[a-z.]{245,252})([^a-zA-Z0-9._-]?[a-z.]{0,3}){0,2}",
        ) {
            proptest::prop_assert_eq!(check_topic_name(&name), reference_check(&name));
        }
    }

    #[test]
    fn every_byte_is_classified_as_its_character() {
        for byte in 0..=255u8 {
            assert_eq!(
                LEGAL_TOPIC_BYTES[usize::from(byte)],
                is_legal_topic_character(byte as char),
                "{byte}"
            );
        }
        assert_eq!(
            check_topic_name("orders.\u{1F600}x"),
            Err(TopicNameProblem::IllegalCharacter {
                character: '\u{1F600}'
            })
        );
    }

    #[test]
    fn topic_name_rules() {
        assert_eq!(check_topic_name(""), Err(TopicNameProblem::Empty));
        assert_eq!(check_topic_name("."), Err(TopicNameProblem::DotOrDotDot));
        assert_eq!(check_topic_name(".."), Err(TopicNameProblem::DotOrDotDot));
        assert_eq!(check_topic_name("..."), Ok(()));
        assert_eq!(
            check_topic_name("a/b"),
            Err(TopicNameProblem::IllegalCharacter { character: '/' })
        );
        assert_eq!(
            check_topic_name("é"),
            Err(TopicNameProblem::IllegalCharacter { character: 'é' })
        );
        assert_eq!(check_topic_name(&"x".repeat(249)), Ok(()));
        assert_eq!(
            check_topic_name(&"x".repeat(250)),
            Err(TopicNameProblem::TooLong { length: 250 })
        );
        assert_eq!(check_topic_name("Orders_v1-2.x"), Ok(()));
    }
}
