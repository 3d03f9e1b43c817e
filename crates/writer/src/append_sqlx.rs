//! [`crate::append_events`] for applications on `sqlx` (feature `sqlx`): the same checks and
//! the same multi-row INSERT, inside an `sqlx::Transaction<'_, MySql>`.

use sqlx::{MySql, Transaction};

use crate::append::{
    check_event_fits_table, insert_columns, insert_statement, row_values,
    MAX_PLACEHOLDERS_PER_STATEMENT,
};
use crate::error::WriterError;
use crate::event::OutboxEvent;
use crate::table::OutboxTable;

/// Appends `events`, in order, inside the caller's sqlx `transaction` (see
/// [`crate::append_events`] for the contract).
pub async fn append_events_sqlx(
    transaction: &mut Transaction<'_, MySql>,
    table: &OutboxTable,
    events: &[OutboxEvent],
) -> Result<(), WriterError> {
    for event in events {
        check_event_fits_table(table, event)?;
    }
    let column_list = insert_columns(table);
    let rows_per_statement = (MAX_PLACEHOLDERS_PER_STATEMENT / column_list.len()).max(1);
    for chunk in events.chunks(rows_per_statement) {
        let statement = insert_statement(table, &column_list, chunk.len());
        let mut query = sqlx::query(&statement);
        for event in chunk {
            for value in row_values(table, event) {
                query = query.bind(value);
            }
        }
        query
            .execute(&mut **transaction)
            .await
            .map_err(|source| WriterError::Sqlx {
                table: table.display_name(),
                events: chunk.len(),
                source,
            })?;
    }
    Ok(())
}

/// Deadlocks (1213), lock wait timeouts (1205), I/O and pool timeouts are worth retrying.
pub(crate) fn is_transient_sqlx_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(database) => database
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|mysql| matches!(mysql.number(), 1205 | 1213)),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        _ => false,
    }
}
