package occflow.lease;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Locale;
import java.util.Map;

/**
 * The task's lease window as a commit sees it: a JSON file {@code {"fence": N, "live_until":
 * EPOCH_SECONDS}} that the task keeps fresh while its lease is live
 * (occflow/engines/spark/lease_window.py writes it and checks it the same way, in Python).
 *
 * <p>Read on every check, never cached: the point is to see the task's latest word at the commit.
 * Each table format's wrapper turns a refusal into its own exception: the Iceberg catalog ({@code
 * occflow.iceberg.LeaseFencedCatalog}) and the Delta log store ({@code
 * occflow.delta.LeaseFencedLogStore}). This class depends on no table format (nor on a JSON
 * library: {@link WindowJson}), so both load it. {@code main} runs one check from the command line
 * (the tests hold it against the Python check).
 */
public final class LeaseWindow {
  public static final String WINDOW = "occflow.lease.window";
  public static final String FENCE = "occflow.lease.fence";
  public static final String MARGIN = "occflow.lease.commit-margin-seconds";

  private final Path path;
  private final long fence;
  private final double marginSeconds;

  public LeaseWindow(Path path, long fence, double marginSeconds) {
    this.path = path;
    this.fence = fence;
    this.marginSeconds = marginSeconds;
  }

  /** From a wrapper's properties; a fenced wrapper without its window is a setup error. */
  public static LeaseWindow fromProperties(String owner, Map<String, String> properties) {
    String window = properties.get(WINDOW);
    String fence = properties.get(FENCE);
    if (window == null || fence == null) {
      throw new IllegalArgumentException(
          String.format(
              "occflow's lease fence %s needs the properties %s (the task's lease window file) "
                  + "and %s (the lease's fencing token); got %s=%s, %s=%s",
              owner, WINDOW, FENCE, WINDOW, window, FENCE, fence));
    }
    String margin = properties.getOrDefault(MARGIN, "1.0");
    return new LeaseWindow(Paths.get(window), Long.parseLong(fence.trim()), Double.parseDouble(margin.trim()));
  }

  public long fence() {
    return fence;
  }

  public Path path() {
    return path;
  }

  /** Why the lease is not certainly live for the margin from now, or null when it is. */
  public String refusal() {
    return refusal(System.currentTimeMillis() / 1000.0);
  }

  /** Why the lease is not certainly live at {@code now} (epoch seconds), or null when it is. */
  public String refusal(double now) {
    long found;
    double liveUntil;
    try {
      Map<String, Object> data =
          WindowJson.object(new String(Files.readAllBytes(path), StandardCharsets.UTF_8));
      found = integer(data, "fence");
      liveUntil = number(data, "live_until");
    } catch (IOException | IllegalArgumentException e) {
      return String.format(
          "the task's lease window %s cannot be read (%s): not committing", path, e.getMessage());
    }
    if (found != fence) {
      return String.format(
          "the lease window names fence %d, this driver was started under %d", found, fence);
    }
    double left = liveUntil - now;
    if (left >= marginSeconds) {
      return null;
    }
    String why;
    if (liveUntil <= 0) {
      why = "the task lost it";
    } else if (left < 0) {
      why = String.format(Locale.ROOT, "%.1fs past its last confirmed validity", -left);
    } else {
      why = String.format(
          Locale.ROOT, "only %.1fs of it left, less than the commit margin of %.1fs", left, marginSeconds);
    }
    return String.format("the write's lease (fence %d) is not certainly live: %s", fence, why);
  }

  private static Object field(Map<String, Object> data, String name) {
    Object value = data.get(name);
    if (value == null) {
      throw new IllegalArgumentException("no " + name);
    }
    return value;
  }

  private static long integer(Map<String, Object> data, String name) {
    Object value = field(data, name);
    try {
      if (value instanceof Double) {
        return ((Double) value).longValue();
      }
      if (value instanceof String) {
        return Long.parseLong(((String) value).trim());
      }
    } catch (NumberFormatException e) {
      // below
    }
    throw new IllegalArgumentException(name + " is not an integer: " + value);
  }

  private static double number(Map<String, Object> data, String name) {
    Object value = field(data, name);
    try {
      if (value instanceof Double) {
        return (Double) value;
      }
      if (value instanceof String) {
        return Double.parseDouble(((String) value).trim());
      }
    } catch (NumberFormatException e) {
      // below
    }
    throw new IllegalArgumentException(name + " is not a number: " + value);
  }

  /** {@code LeaseWindow PATH FENCE [MARGIN]}: exit 0 live, 1 not live (the reason on stdout), 2 usage. */
  public static void main(String[] args) {
    if (args.length < 2 || args.length > 3) {
      System.err.println("usage: LeaseWindow PATH FENCE [MARGIN_SECONDS]");
      System.exit(2);
    }
    double margin = args.length == 3 ? Double.parseDouble(args[2]) : 1.0;
    String refusal = new LeaseWindow(Paths.get(args[0]), Long.parseLong(args[1]), margin).refusal();
    if (refusal != null) {
      System.out.println(refusal);
      System.exit(1);
    }
  }
}
