//! Settings: SET, RESET and SHOW over the session's [`Settings`].
//!
//! [`Settings`]: crate::settings::Settings

use std::sync::Arc;

use pgwire::api::Type;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};

use super::prepare::Prepared;
use super::{ConnHandler, one_text_row};
use crate::sqlstate::PgError;

impl ConnHandler {
    /// SET name = value, RESET name, SHOW name / SHOW ALL.
    pub(super) fn setting(&self, p: &Prepared) -> Result<Response, PgError> {
        Ok(match p {
            Prepared::Set(name, value) => {
                let mut s = self.session.lock();
                // Debug builds only (tests): a statement that panics its
                // connection's thread while holding the session's state.
                // Not under the fuzzer, for which any panic is a finding.
                #[cfg(all(debug_assertions, not(fuzzing)))]
                if name.eq_ignore_ascii_case("tablegate.inject_panic") {
                    panic!("injected panic: {value}");
                }
                s.settings.set(name, value)?;
                Response::Execution(Tag::new("SET"))
            }
            Prepared::Reset(name) => {
                self.session.lock().settings.reset(name)?;
                Response::Execution(Tag::new("RESET"))
            }
            Prepared::Show(name) if name.eq_ignore_ascii_case("all") => {
                let text =
                    |n: &str| FieldInfo::new(n.into(), None, None, Type::TEXT, FieldFormat::Text);
                let f = Arc::new(vec![text("name"), text("setting")]);
                let mut enc = DataRowEncoder::new(f.clone());
                let rows: Vec<_> = self
                    .session
                    .lock()
                    .settings
                    .all()
                    .map(|(k, v)| {
                        enc.encode_field(&k.as_str())?;
                        enc.encode_field(&v.as_str())?;
                        Ok(enc.take_row())
                    })
                    .collect();
                Response::Query(QueryResponse::new(f, futures::stream::iter(rows)))
            }
            Prepared::Show(name) if name.eq_ignore_ascii_case("transaction_read_only") => {
                let on = self.session.lock().read_only_now();
                one_text_row(name, &[if on { "on" } else { "off" }.to_owned()])
            }
            Prepared::Show(name) => {
                // `SHOW TIME ZONE` and the like are words, not a dotted name.
                let v = {
                    let s = &self.session.lock().settings;
                    s.get(name)
                        .or_else(|e| s.get(&name.replace('.', " ")).map_err(|_| e))?
                };
                one_text_row(name, &[v])
            }
            _ => return Err(PgError::internal("not a settings statement")),
        })
    }
}
