package turbinesql;

import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.TimeZone;

/**
 * The PgJDBC session of {@code make test-clients}: DDL, INSERT and FLUSH,
 * then typed SELECTs and a PreparedStatement with parameters of every type,
 * run often enough for PgJDBC to switch to a named server-side statement
 * with binary results, and once more on a connection that uses binary
 * transfer from the first execution (prepareThreshold=-1). Exits non-zero
 * at the first difference.
 */
public final class Session {
  private static final String ROWS =
      "s1|1|1.5|true|2024-01-01 00:00:00.0\n"
          + "s2|2|-2.25|false|2024-01-01 00:00:30.5\n"
          + "s1|3|null|null|2024-01-01 00:00:59.0\n"
          + "s1|4|0.5|true|2024-01-01 00:02:00.0\n"
          + "s2|5|0.5|true|2024-01-01 00:02:00.0\n";

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      throw new IllegalArgumentException("usage: Session jdbc:postgresql://host:port/db?user=...");
    }
    // Timestamps without time zone are read in the JVM's zone: pin it.
    TimeZone.setDefault(TimeZone.getTimeZone("UTC"));
    try {
      run(args[0]);
    } catch (Throwable t) {
      System.err.println("jdbc: FAIL: " + t);
      t.printStackTrace();
      System.exit(1);
    }
    System.out.println("jdbc: ok");
  }

  private static void run(String url) throws SQLException {
    try (Connection c = DriverManager.getConnection(url)) {
      DatabaseMetaData md = c.getMetaData();
      check("server major version", 16, md.getDatabaseMajorVersion());
      check("product version", true, md.getDatabaseProductVersion().startsWith("16."));
      setup(c);
      session(c, "default");
    }
    Properties binary = new Properties();
    binary.setProperty("prepareThreshold", "-1");
    try (Connection c = DriverManager.getConnection(url, binary)) {
      session(c, "prepareThreshold=-1");
    }
  }

  private static void setup(Connection c) throws SQLException {
    try (Statement s = c.createStatement()) {
      s.execute(
          "CREATE SOURCE readings (sensor TEXT, seq BIGINT, value DOUBLE, ok BOOLEAN, ts TIMESTAMP,"
              + " WATERMARK FOR ts AS ts) WITH (topic = 'readings', partitions = 2, partition_key = 'sensor')");
      s.execute(
          "INSERT INTO readings VALUES ('s1', 1, 1.5, true, TIMESTAMP '2024-01-01 00:00:00'),"
              + " ('s2', 2, -2.25, false, TIMESTAMP '2024-01-01 00:00:30.5'),"
              + " ('s1', 3, NULL, NULL, TIMESTAMP '2024-01-01 00:00:59')");
      s.execute(
          "CREATE STREAM per_sensor WITH (topic = 'per_sensor') AS"
              + " SELECT sensor, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w, COUNT(*) AS n, SUM(value) AS total"
              + " FROM readings GROUP BY sensor, TUMBLE(ts, INTERVAL '1' MINUTE)");
      // An upsert stream: its group key is its primary key.
      s.execute(
          "CREATE STREAM sensor_counts WITH (topic = 'sensor_counts') AS"
              + " SELECT sensor, COUNT(*) AS n FROM readings GROUP BY sensor");
    }
    // Parameters of every type through a PreparedStatement INSERT: one
    // timestamp as java.sql.Timestamp, one as LocalDateTime.
    try (PreparedStatement ps = c.prepareStatement("INSERT INTO readings VALUES (?, ?, ?, ?, ?)")) {
      ps.setString(1, "s1");
      ps.setLong(2, 4);
      ps.setDouble(3, 0.5);
      ps.setBoolean(4, true);
      ps.setTimestamp(5, Timestamp.valueOf("2024-01-01 00:02:00"));
      check("INSERT count", 1, ps.executeUpdate());
      ps.setString(1, "s2");
      ps.setInt(2, 5);
      ps.setDouble(3, 0.5);
      ps.setBoolean(4, true);
      ps.setObject(5, LocalDateTime.of(2024, 1, 1, 0, 2, 0));
      check("INSERT count", 1, ps.executeUpdate());
    }
    try (Statement s = c.createStatement()) {
      s.execute("FLUSH");
    }
  }

  private static void session(Connection c, String name) throws SQLException {
    try (Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT sensor, seq, value, ok, ts FROM readings ORDER BY seq")) {
      ResultSetMetaData md = rs.getMetaData();
      int[] types = {Types.VARCHAR, Types.BIGINT, Types.DOUBLE, Types.BIT, Types.TIMESTAMP};
      String[] names = {"text", "int8", "float8", "bool", "timestamp"};
      for (int i = 0; i < types.length; i++) {
        check(name + ": type of column " + (i + 1), types[i], md.getColumnType(i + 1));
        check(name + ": type name of column " + (i + 1), names[i], md.getColumnTypeName(i + 1));
      }
      check(name + ": typed SELECT", ROWS, rows(rs));
    }

    // A PreparedStatement run seven times: PgJDBC moves to a named
    // server-side statement and binary results after prepareThreshold (5).
    String sql =
        "SELECT sensor, seq, value, ok, ts FROM readings"
            + " WHERE seq >= ? AND sensor = ? AND ts > ? AND value < ? AND ok = ? ORDER BY seq";
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < 7; i++) {
        ps.setLong(1, 2);
        ps.setString(2, "s2");
        ps.setObject(3, LocalDateTime.of(2024, 1, 1, 0, 0, 10));
        ps.setDouble(4, 1.0);
        ps.setBoolean(5, true);
        try (ResultSet rs = ps.executeQuery()) {
          check(name + ": parameterised SELECT, run " + (i + 1), "s2|5|0.5|true|2024-01-01 00:02:00.0\n", rows(rs));
        }
      }
    }

    try (PreparedStatement ps = c.prepareStatement("SELECT sensor, w, n, total FROM per_sensor ORDER BY sensor")) {
      for (int i = 0; i < 6; i++) {
        try (ResultSet rs = ps.executeQuery()) {
          StringBuilder b = new StringBuilder();
          while (rs.next()) {
            b.append(rs.getString(1)).append('|').append(rs.getObject(2, LocalDateTime.class)).append('|')
                .append(rs.getLong(3)).append('|').append(rs.getDouble(4)).append('\n');
          }
          check(name + ": stream SELECT", "s1|2024-01-01T00:00|2|1.5\ns2|2024-01-01T00:00|1|-2.25\n", b.toString());
        }
      }
    }

    // An error, told by its SQLSTATE; the connection stays usable.
    try (Statement s = c.createStatement()) {
      s.executeQuery("SELECT * FROM missing");
      throw new AssertionError(name + ": SELECT from a missing relation succeeded");
    } catch (SQLException e) {
      check(name + ": SQLSTATE", "42P01", e.getSQLState());
    }

    // Transactions are accepted; SHOW answers settings.
    c.setAutoCommit(false);
    try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SHOW server_version")) {
      check(name + ": SHOW returns a row", true, rs.next());
      check(name + ": server_version", true, rs.getString(1).startsWith("16."));
    }
    c.commit();
    c.setAutoCommit(true);

    // DatabaseMetaData reads pg_catalog.
    List<String> tables = new ArrayList<>();
    try (ResultSet rs = c.getMetaData().getTables(null, "public", "%", null)) {
      while (rs.next()) {
        tables.add(rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
      }
    }
    check(name + ": getTables (an upsert stream's primary key is an index, as PostgreSQL lists it)",
        "[sensor_counts_pkey:INDEX, per_sensor:MATERIALIZED VIEW, sensor_counts:MATERIALIZED VIEW, readings:TABLE]",
        tables.toString());
    List<String> cols = new ArrayList<>();
    try (ResultSet rs = c.getMetaData().getColumns(null, "public", "readings", "%")) {
      while (rs.next()) {
        cols.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE")
            + ":" + rs.getInt("ORDINAL_POSITION") + ":" + rs.getString("IS_NULLABLE"));
      }
    }
    check(name + ": getColumns",
        "[sensor:text:12:1:YES, seq:int8:-5:2:YES, value:float8:8:3:YES, ok:bool:-7:4:YES, ts:timestamp:93:5:NO]",
        cols.toString());
    List<String> pk = new ArrayList<>();
    try (ResultSet rs = c.getMetaData().getPrimaryKeys(null, "public", "sensor_counts")) {
      while (rs.next()) {
        pk.add(rs.getString("TABLE_NAME") + ":" + rs.getString("COLUMN_NAME") + ":" + rs.getInt("KEY_SEQ")
            + ":" + rs.getString("PK_NAME"));
      }
    }
    check(name + ": getPrimaryKeys", "[sensor_counts:sensor:1:sensor_counts_pkey]", pk.toString());
    try (ResultSet rs = c.getMetaData().getPrimaryKeys(null, "public", "readings")) {
      check(name + ": a source has no primary key", false, rs.next());
    }
    List<String> typeNames = new ArrayList<>();
    try (ResultSet rs = c.getMetaData().getTypeInfo()) {
      while (rs.next()) {
        typeNames.add(rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE"));
      }
    }
    for (String t : new String[] {"int8:-5", "text:12", "float8:8", "bool:-7", "timestamp:93"}) {
      check(name + ": getTypeInfo lists " + t, true, typeNames.contains(t));
    }
    System.out.println("jdbc: " + name + " ok");
  }

  private static String rows(ResultSet rs) throws SQLException {
    StringBuilder b = new StringBuilder();
    while (rs.next()) {
      Object v = rs.getObject(3);
      Object ok = rs.getObject(4);
      b.append(rs.getString(1)).append('|').append(rs.getLong(2)).append('|').append(v).append('|')
          .append(ok).append('|').append(rs.getTimestamp(5)).append('\n');
      if (v != null && !(v instanceof Double)) {
        throw new AssertionError("value is a " + v.getClass());
      }
      if (ok != null && !(ok instanceof Boolean)) {
        throw new AssertionError("ok is a " + ok.getClass());
      }
    }
    return b.toString();
  }

  private static void check(String what, Object want, Object got) {
    if (!want.equals(got)) {
      throw new AssertionError(what + ":\n got " + got + "\nwant " + want);
    }
  }
}
