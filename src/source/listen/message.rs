//! Assembling DIMSE messages from presentation data values (PS3.8 §9.3.5, Annex E): a
//! message is a command set, possibly split over several PDVs (and PDUs), followed, when the
//! command says so, by a data set split over as many PDVs as it needs. The command fragments
//! are gathered in a buffer of bounded size; the data set fragments are handed on one at a
//! time as they arrive (the caller streams them to the spool), so no instance is ever held
//! whole in memory.

use super::dimse::{parse_command, CommandError, CommandSet};
use super::wire::Pdv;

/// Why a stream of PDVs is not a valid sequence of messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// A data fragment arrived while no command announced a data set.
    #[error("data set fragment without a command announcing one (presentation context {context})")]
    DataWithoutCommand { context: u8 },
    /// A command fragment arrived in the middle of a data set.
    #[error("command fragment in the middle of a data set (presentation context {context})")]
    CommandInsideData { context: u8 },
    /// The fragments of one message used different presentation contexts.
    #[error("message fragments switch presentation context from {expected} to {got}")]
    ContextChanged { expected: u8, got: u8 },
    /// The command set grew past the limit.
    #[error("command set longer than {limit} bytes")]
    CommandTooLong { limit: usize },
    /// The command set could not be parsed.
    #[error("cannot read the command set: {0}")]
    Command(#[from] CommandError),
}

/// What one PDV made of the message in progress.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// A command fragment was kept; more are coming.
    Pending,
    /// A command set is complete. When `command.has_data_set`, data fragments follow.
    Command { context: u8, command: CommandSet },
    /// A fragment of the data set; `last` ends the message.
    Data { bytes: &'a [u8], last: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between messages, or inside a command set whose fragments came on `context`.
    Command { context: Option<u8> },
    /// Inside the data set of a message on `context`.
    Data { context: u8 },
}

/// Turns PDVs into messages, one PDV at a time.
#[derive(Debug)]
pub struct MessageReader {
    state: State,
    command: Vec<u8>,
    max_command: usize,
}

impl MessageReader {
    /// A reader that refuses command sets longer than `max_command` bytes.
    pub fn new(max_command: usize) -> MessageReader {
        MessageReader {
            state: State::Command { context: None },
            command: Vec::new(),
            max_command,
        }
    }

    /// True between messages (nothing of a message has arrived yet).
    pub fn is_idle(&self) -> bool {
        self.state == State::Command { context: None }
    }

    /// Takes the next PDV.
    pub fn push<'a>(&mut self, pdv: Pdv<'a>) -> Result<Step<'a>, MessageError> {
        let got = pdv.context;
        match (self.state, pdv.is_command) {
            (State::Command { context }, true) => {
                if let Some(expected) = context.filter(|&c| c != got) {
                    return Err(MessageError::ContextChanged { expected, got });
                }
                if self.command.len() + pdv.data.len() > self.max_command {
                    return Err(MessageError::CommandTooLong {
                        limit: self.max_command,
                    });
                }
                self.command.extend_from_slice(pdv.data);
                if !pdv.is_last {
                    self.state = State::Command { context: Some(got) };
                    return Ok(Step::Pending);
                }
                let parsed = parse_command(&self.command);
                self.command.clear();
                // Shrink a buffer a large command grew, so idle associations stay small.
                self.command.shrink_to(1024);
                let command = parsed?;
                self.state = if command.has_data_set {
                    State::Data { context: got }
                } else {
                    State::Command { context: None }
                };
                Ok(Step::Command {
                    context: got,
                    command,
                })
            }
            (State::Command { .. }, false) => {
                Err(MessageError::DataWithoutCommand { context: got })
            }
            (State::Data { context }, false) => {
                if context != got {
                    return Err(MessageError::ContextChanged {
                        expected: context,
                        got,
                    });
                }
                if pdv.is_last {
                    self.state = State::Command { context: None };
                }
                Ok(Step::Data {
                    bytes: pdv.data,
                    last: pdv.is_last,
                })
            }
            (State::Data { .. }, true) => Err(MessageError::CommandInsideData { context: got }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::dimse::{encode_request, C_ECHO_RQ, C_STORE_RQ};
    use super::*;

    fn pdv(context: u8, is_command: bool, is_last: bool, data: &[u8]) -> Pdv<'_> {
        Pdv {
            context,
            is_command,
            is_last,
            data,
        }
    }

    #[test]
    fn a_command_split_over_several_pdvs_then_its_data_set() {
        let cmd = encode_request(C_STORE_RQ, 5, "1.2.840.10008.5.1.4.1.1.2", Some("1.2.3"));
        let mut r = MessageReader::new(1024);
        assert!(r.is_idle());
        // The command in three fragments, as some SCUs send it.
        let (a, rest) = cmd.split_at(5);
        let (b, c) = rest.split_at(20);
        assert_eq!(r.push(pdv(3, true, false, a)).unwrap(), Step::Pending);
        assert!(!r.is_idle());
        assert_eq!(r.push(pdv(3, true, false, b)).unwrap(), Step::Pending);
        let Step::Command { context, command } = r.push(pdv(3, true, true, c)).unwrap() else {
            panic!("no command");
        };
        assert_eq!(context, 3);
        assert!(command.has_data_set);
        let first = pdv(3, false, false, b"abc");
        assert_eq!(
            r.push(first).unwrap(),
            Step::Data {
                bytes: b"abc",
                last: false
            }
        );
        let end = pdv(3, false, true, b"de");
        assert_eq!(
            r.push(end).unwrap(),
            Step::Data {
                bytes: b"de",
                last: true
            }
        );
        assert!(r.is_idle());
        // An echo: no data set, the reader is idle at once.
        let echo = encode_request(C_ECHO_RQ, 6, "1.2.840.10008.1.1", None);
        assert!(matches!(
            r.push(pdv(1, true, true, &echo)).unwrap(),
            Step::Command { context: 1, .. }
        ));
        assert!(r.is_idle());
    }

    #[test]
    fn out_of_order_fragments_are_errors() {
        let cmd = encode_request(C_STORE_RQ, 5, "1.2.840.10008.5.1.4.1.1.2", Some("1.2.3"));
        let mut r = MessageReader::new(1024);
        assert_eq!(
            r.push(pdv(1, false, true, b"x")),
            Err(MessageError::DataWithoutCommand { context: 1 })
        );
        let mut r = MessageReader::new(1024);
        r.push(pdv(1, true, false, &cmd[..4])).unwrap();
        assert_eq!(
            r.push(pdv(3, true, true, &cmd[4..])),
            Err(MessageError::ContextChanged {
                expected: 1,
                got: 3
            })
        );
        let mut r = MessageReader::new(1024);
        r.push(pdv(1, true, true, &cmd)).unwrap();
        assert_eq!(
            r.push(pdv(1, true, true, &cmd)),
            Err(MessageError::CommandInsideData { context: 1 })
        );
        assert_eq!(
            r.push(pdv(5, false, true, b"x")),
            Err(MessageError::ContextChanged {
                expected: 1,
                got: 5
            })
        );
        let mut r = MessageReader::new(16);
        assert_eq!(
            r.push(pdv(1, true, true, &cmd)),
            Err(MessageError::CommandTooLong { limit: 16 })
        );
        let mut r = MessageReader::new(1024);
        assert!(matches!(
            r.push(pdv(1, true, true, b"garbage!")),
            Err(MessageError::Command(_))
        ));
    }
}
