"""What the History page's SQL endpoint sends to Spark, and what it refuses before sending anything.

Queries go as ``SELECT * FROM (<query>)`` so Spark's own parser admits only
queries; inspection statements go as they are; everything else, a second
statement and the functions that call Java methods are refused here.  The
real server's side of it is in test_sql_history.py.
"""

from __future__ import annotations

import datetime
import decimal

import pytest

from mgmt.sql_history import QueryRefused, json_value, read_only_statement


def wrapped(query: str) -> str:
    return f"SELECT * FROM (\n{query}\n) AS history_query"


@pytest.mark.parametrize(("query", "sent"), [
    ("SELECT 1", wrapped("SELECT 1")),
    ("select * from journal;", wrapped("select * from journal")),
    ("SELECT 1 -- a note", wrapped("SELECT 1 -- a note")),
    ("WITH a AS (SELECT 1 AS x) SELECT x FROM a", wrapped("WITH a AS (SELECT 1 AS x) SELECT x FROM a")),
    ("VALUES (1, 2)", wrapped("VALUES (1, 2)")),
    ("TABLE journal", wrapped("TABLE journal")),
    ("(SELECT 1) UNION ALL (SELECT 2)", wrapped("(SELECT 1) UNION ALL (SELECT 2)")),
    ("  /* why; DROP VIEW x */ SELECT ';' AS s, 'delete' AS t, \"insert\" AS u",
     wrapped("  /* why; DROP VIEW x */ SELECT ';' AS s, 'delete' AS t, \"insert\" AS u")),
    ("SELECT 'it\\'s; DROP' AS s;  -- done", wrapped("SELECT 'it\\'s; DROP' AS s")),
    ("SHOW VIEWS", "SHOW VIEWS"),
    ("describe queue_history;", "describe queue_history"),
    ("DESC TABLE journal", "DESC TABLE journal"),
    ("EXPLAIN SELECT count(*) FROM journal", "EXPLAIN SELECT count(*) FROM journal"),
    # a WITH that hides an INSERT behind a raw string is still only sent as a subquery,
    # where Spark's parser refuses it
    ("WITH a AS (SELECT r'\\') INSERT INTO t SELECT 1 --'",
     wrapped("WITH a AS (SELECT r'\\') INSERT INTO t SELECT 1 --'")),
])
def test_read_only_statements_are_sent(query: str, sent: str) -> None:
    assert read_only_statement(query) == sent


@pytest.mark.parametrize(("query", "reason"), [
    ("INSERT INTO t VALUES (1)", "INSERT is not one of them"),
    ("drop view journal", "DROP is not one of them"),
    ("DELETE FROM delta.`/data/default/journal`", "DELETE is not one of them"),
    ("UPDATE t SET a = 1", "UPDATE is not one of them"),
    ("MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE", "MERGE is not one of them"),
    ("CREATE TABLE t (a INT)", "CREATE is not one of them"),
    ("SET spark.sql.ansi.enabled = false", "SET is not one of them"),
    ("CACHE TABLE journal", "CACHE is not one of them"),
    ("FROM journal INSERT INTO t SELECT *", "FROM is not one of them"),
    ("/* SELECT */ TRUNCATE TABLE t", "TRUNCATE is not one of them"),
    ("SELECT 1; DROP VIEW journal", "give one statement"),
    ("SELECT 1;;", "give one statement"),
    ("SELECT java_method('java.lang.System', 'exit', 0)", "java_method() is not allowed here"),
    ("SELECT REFLECT('java.lang.System', 'exit', 0)", "reflect() is not allowed here"),
    ("SELECT `try_reflect`('java.lang.System', 'exit', 0)", "try_reflect() is not allowed here"),
    ("SELECT /*+ REPARTITION(reflect('a', 'b')) */ 1", "reflect() is not allowed here"),
    ("SELECT 'open", "a string is not closed"),
    ("SELECT 1 /* open /* nested */", "a comment is not closed"),
    ("SELECT `open FROM t", "a quoted identifier is not closed"),
    ("", "the query is empty"),
    ("  -- nothing but a note\n", "the query is empty"),
])
def test_other_statements_are_refused_naming_why(query: str, reason: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        read_only_statement(query)
    assert reason in str(refused.value)


def test_the_refusal_lists_what_runs() -> None:
    with pytest.raises(QueryRefused) as refused:
        read_only_statement("DROP VIEW journal")
    assert str(refused.value) == ("only read-only statements run here (DESC, DESCRIBE, EXPLAIN, SELECT,"
                                  " SHOW, TABLE, VALUES, WITH); DROP is not one of them")


def test_values_become_json() -> None:
    at = datetime.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.UTC)
    assert json_value(b"\x00hi") == "AGhp"
    assert json_value(at) == "2026-01-02T03:04:05.600000+00:00"
    assert json_value(datetime.date(2026, 1, 2)) == "2026-01-02"
    assert json_value(decimal.Decimal("1.50")) == "1.50"
    assert json_value(float("nan")) == "nan" and json_value(1.5) == 1.5
    assert json_value([("x-death", b"\x01"), ("k", None)]) == {"x-death": "AQ==", "k": None}   # a map
    assert json_value({"a": [1, {"b": at}]}) == {"a": [1, {"b": "2026-01-02T03:04:05.600000+00:00"}]}
    assert json_value([]) == [] and json_value(None) is None and json_value(True) is True
