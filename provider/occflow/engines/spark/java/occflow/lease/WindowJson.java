package occflow.lease;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads the lease window file: one JSON object (RFC 8259). Numbers become {@link Double}s,
 * strings {@link String}s, {@code true}/{@code false} {@link Boolean}s, {@code null} a missing
 * value; nested arrays and objects are read and kept as lists and maps. Anything else is an
 * {@link IllegalArgumentException}.
 *
 * <p>Why not a JSON library: the lease check loads in every Spark runtime occflow wraps (Iceberg
 * shades its Jackson, delta-spark uses Spark's), and its jar compiles against the table formats'
 * APIs only.
 */
final class WindowJson {
  private final String text;
  private int at;

  private WindowJson(String text) {
    this.text = text;
  }

  /** The object {@code text} holds; {@link IllegalArgumentException} when it holds anything else. */
  @SuppressWarnings("unchecked")
  static Map<String, Object> object(String text) {
    WindowJson reader = new WindowJson(text);
    reader.space();
    if (reader.at >= text.length() || text.charAt(reader.at) != '{') {
      throw new IllegalArgumentException("not a JSON object");
    }
    Object value = reader.value();
    reader.space();
    if (reader.at != text.length()) {
      throw reader.error("trailing text");
    }
    return (Map<String, Object>) value;
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("not JSON: " + what + " at offset " + at);
  }

  private void space() {
    while (at < text.length() && " \t\r\n".indexOf(text.charAt(at)) >= 0) {
      at++;
    }
  }

  private char peek() {
    if (at >= text.length()) {
      throw error("unexpected end");
    }
    return text.charAt(at);
  }

  private void expect(char c) {
    if (peek() != c) {
      throw error("expected '" + c + "'");
    }
    at++;
  }

  private Object value() {
    space();
    char c = peek();
    switch (c) {
      case '{':
        return map();
      case '[':
        return list();
      case '"':
        return string();
      case 't':
        return literal("true", Boolean.TRUE);
      case 'f':
        return literal("false", Boolean.FALSE);
      case 'n':
        return literal("null", null);
      default:
        return number();
    }
  }

  private Map<String, Object> map() {
    expect('{');
    Map<String, Object> out = new HashMap<>();
    space();
    if (peek() == '}') {
      at++;
      return out;
    }
    while (true) {
      space();
      String key = string();
      space();
      expect(':');
      out.put(key, value());
      space();
      if (peek() == ',') {
        at++;
        continue;
      }
      expect('}');
      return out;
    }
  }

  private List<Object> list() {
    expect('[');
    List<Object> out = new ArrayList<>();
    space();
    if (peek() == ']') {
      at++;
      return out;
    }
    while (true) {
      out.add(value());
      space();
      if (peek() == ',') {
        at++;
        continue;
      }
      expect(']');
      return out;
    }
  }

  private String string() {
    expect('"');
    StringBuilder out = new StringBuilder();
    while (true) {
      char c = peek();
      at++;
      if (c == '"') {
        return out.toString();
      }
      if (c < 0x20) {
        throw error("control character in a string");
      }
      if (c != '\\') {
        out.append(c);
        continue;
      }
      char e = peek();
      at++;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.append(e);
          break;
        case 'b':
          out.append('\b');
          break;
        case 'f':
          out.append('\f');
          break;
        case 'n':
          out.append('\n');
          break;
        case 'r':
          out.append('\r');
          break;
        case 't':
          out.append('\t');
          break;
        case 'u':
          if (at + 4 > text.length()) {
            throw error("short \\u escape");
          }
          try {
            out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
          } catch (NumberFormatException ex) {
            throw error("bad \\u escape");
          }
          at += 4;
          break;
        default:
          throw error("bad escape");
      }
    }
  }

  private Object literal(String word, Object value) {
    if (!text.startsWith(word, at)) {
      throw error("unknown literal");
    }
    at += word.length();
    return value;
  }

  private Double number() {
    int start = at;
    while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
      at++;
    }
    String found = text.substring(start, at);
    if (found.isEmpty() || !found.matches("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?")) {
      throw error("bad value");
    }
    return Double.valueOf(found);
  }
}
