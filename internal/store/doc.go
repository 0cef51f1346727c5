// Package store is Countersign's store (SPEC §8, §16): the contract the program uses (Backend)
// and its one implementation in SQL (SQL), every table's code written once over a small seam
// (Conn, Dialect) that the backends fill in: internal/store/sqlite (SQLite, the default: one
// file, a FIFO write queue) and internal/store/pg (PostgreSQL, for replicas sharing one
// database). Each row is described once: its columns, its values and its scan (approvalColumns,
// appendApprovalRow, scanApproval). Driver errors become apperr codes here, through the
// dialect's ErrKind: a duplicate key is apperr.Conflict, an unknown id apperr.NotFound, a value
// the schema refuses apperr.Invalid; anything else is internal.
package store
