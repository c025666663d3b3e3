package occflow.delta;

import io.delta.storage.CloseableIterator;
import io.delta.storage.LogStore;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import occflow.lease.AttemptWindow;
import occflow.lease.LeaseWindow;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * The LogStore delta-spark commits through, with the write's lease checked right before the
 * commit file is written (issue 34): delta-spark makes a commit visible by {@code
 * LogStore.write(_delta_log/<version>.json, actions, overwrite=false)}, after the statement has
 * written its data files and checked for conflicts. This class delegates every call to the
 * scheme's real LogStore and, on that write only, checks the lease first: when it is not
 * certainly live it throws {@link LeaseNotLiveException} and writes nothing.
 *
 * <p>Set as {@code spark.delta.logStore.<scheme>.impl} (occflow sets it for the schemes Delta
 * knows, and for any scheme the config named a LogStore for). The LogStore it wraps is the one
 * named by {@code spark.occflow.delta.logStore.<scheme>.delegate}, else {@code
 * spark.occflow.delta.logStore.delegate} (what the config had as {@code spark.delta.logStore.class}),
 * else the one Delta uses for the scheme by default ({@code io.delta.storage.HDFSLogStore} for
 * file and hdfs, {@code S3SingleDriverLogStore} for s3a, ...). A Java LogStore is built directly,
 * a Scala one through delta-spark's own factory and inverse adaptor.
 *
 * <p>Which window a commit checks is {@code spark.occflow.lease.scope}: {@code session} (the
 * default; a spark-submit driver runs one write, whose window the session's conf names: {@code
 * spark.occflow.lease.window}, {@code .fence}, {@code .commit-margin-seconds}) or {@code thread}
 * (an in-process session that every write of the process shares: the window of the attempt the
 * committing thread runs, {@link AttemptWindow}; a thread that runs none commits unchecked).
 * Settings are read from the Hadoop conf delta-spark hands the call (the session's SQL conf, in
 * which Spark's conf is), then from the one this store was built with, then from Spark's conf.
 */
public class LeaseFencedLogStore extends LogStore {
  public static final String SPARK_PREFIX = "spark.";
  public static final String SCOPE = "spark.occflow.lease.scope";
  public static final String SCOPE_SESSION = "session";
  public static final String SCOPE_THREAD = "thread";
  public static final String DELEGATE = "spark.occflow.delta.logStore.%s.delegate";
  public static final String DELEGATE_ANY = "spark.occflow.delta.logStore.delegate";

  private static final Pattern COMMIT_FILE = Pattern.compile("\\d{20}\\.json");
  private static final String DELTA_LOG_STORES = "org.apache.spark.sql.delta.storage.";
  private static final String DEFAULT_DELEGATE = "io.delta.storage.HDFSLogStore";

  private final Map<String, LogStore> delegates = new ConcurrentHashMap<>();

  public LeaseFencedLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  // ------------------------------------------------------------------ the commit: checked

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    LogStore delegate = delegate(path, hadoopConf);
    if (!Boolean.TRUE.equals(overwrite) && isCommitFile(path)) {
      check(path, hadoopConf);
    }
    delegate.write(path, actions, overwrite, hadoopConf);
  }

  /** {@code <table>/_delta_log/<20 digits>.json}: a commit (checkpoints, checksums and {@code
   * _last_checkpoint} are not). */
  static boolean isCommitFile(Path path) {
    Path parent = path.getParent();
    return parent != null
        && "_delta_log".equals(parent.getName())
        && COMMIT_FILE.matcher(path.getName()).matches();
  }

  private void check(Path path, Configuration hadoopConf) {
    String scope = setting(hadoopConf, SCOPE);
    LeaseWindow window;
    if (SCOPE_THREAD.equals(scope)) {
      window = AttemptWindow.current();
      if (window == null) {
        return; // this thread runs no write attempt under a lease
      }
    } else if (scope == null || SCOPE_SESSION.equals(scope)) {
      Map<String, String> properties = new HashMap<>();
      for (String key : new String[] {LeaseWindow.WINDOW, LeaseWindow.FENCE, LeaseWindow.MARGIN}) {
        String value = setting(hadoopConf, SPARK_PREFIX + key);
        if (value != null) {
          properties.put(key, value);
        }
      }
      window = LeaseWindow.fromProperties("occflow.delta.LeaseFencedLogStore (spark." + LeaseWindow.WINDOW + ")",
          properties);
    } else {
      throw new IllegalArgumentException(String.format(
          "occflow's lease-fenced Delta log store: %s must be %s or %s, got %s",
          SCOPE, SCOPE_SESSION, SCOPE_THREAD, scope));
    }
    String refusal = window.refusal();
    if (refusal != null) {
      Path table = path.getParent().getParent();
      String version = path.getName().substring(0, 20).replaceFirst("^0+(?=.)", "");
      throw new LeaseNotLiveException(
          "occflow: lease not live at the commit of " + table + " version " + version + ", not committing: "
              + refusal,
          window.fence());
    }
  }

  /** {@code key} from the call's Hadoop conf, else this store's, else Spark's own conf. */
  private String setting(Configuration hadoopConf, String key) {
    String value = hadoopConf == null ? null : hadoopConf.get(key);
    if (value == null) {
      value = initHadoopConf().get(key);
    }
    return value != null ? value : sparkSetting(key);
  }

  private static String sparkSetting(String key) {
    try {
      Object env = load("org.apache.spark.SparkEnv").getMethod("get").invoke(null);
      if (env == null) {
        return null;
      }
      Object conf = env.getClass().getMethod("conf").invoke(env);
      return (String) conf.getClass().getMethod("get", String.class, String.class).invoke(conf, key, null);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  // ------------------------------------------------------------------ the scheme's real LogStore

  private LogStore delegate(Path path, Configuration hadoopConf) {
    String scheme = path.toUri().getScheme();
    String key = scheme == null ? "" : scheme.toLowerCase(Locale.ROOT);
    return delegates.computeIfAbsent(key, s -> build(s, hadoopConf));
  }

  private LogStore build(String scheme, Configuration hadoopConf) {
    Configuration conf = initHadoopConf();
    String name = setting(hadoopConf, String.format(DELEGATE, scheme));
    if (name == null) {
      name = setting(hadoopConf, DELEGATE_ANY);
    }
    if (name == null) {
      name = deltaDefault(scheme);
    }
    name = name.trim();
    if (name.equals(getClass().getName())) {
      throw new IllegalArgumentException(
          "occflow's lease-fenced Delta log store cannot wrap itself (scheme " + scheme + ")");
    }
    try {
      Class<?> cls = load(name);
      if (LogStore.class.isAssignableFrom(cls)) {
        return (LogStore) cls.getConstructor(Configuration.class).newInstance(conf);
      }
      // A Scala LogStore (org.apache.spark.sql.delta.storage.LogStore): built by delta-spark.
      Object factory = load(DELTA_LOG_STORES + "LogStore$").getField("MODULE$").get(null);
      Class<?> sparkConfClass = load("org.apache.spark.SparkConf");
      Object env = load("org.apache.spark.SparkEnv").getMethod("get").invoke(null);
      Object sparkConf = env == null ? sparkConfClass.getConstructor().newInstance()
          : env.getClass().getMethod("conf").invoke(env);
      Object scalaStore = factory.getClass()
          .getMethod("createLogStoreWithClassName", String.class, sparkConfClass, Configuration.class)
          .invoke(factory, name, sparkConf, conf);
      Class<?> scalaLogStore = load(DELTA_LOG_STORES + "LogStore");
      return (LogStore) load(DELTA_LOG_STORES + "LogStoreInverseAdaptor")
          .getMethod("apply", scalaLogStore, Configuration.class)
          .invoke(null, scalaStore, conf);
    } catch (InvocationTargetException e) {
      Throwable cause = e.getCause() == null ? e : e.getCause();
      throw new IllegalStateException(
          "occflow's lease-fenced Delta log store cannot build its delegate " + name + ": " + cause, cause);
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new IllegalStateException(
          "occflow's lease-fenced Delta log store cannot build its delegate " + name + ": " + e, e);
    }
  }

  /** The LogStore Delta uses for {@code scheme} when nothing is configured. */
  private static String deltaDefault(String scheme) {
    try {
      Class<?> delegating = load(DELTA_LOG_STORES + "DelegatingLogStore");
      Object found = delegating.getMethod("getDefaultLogStoreClassName", String.class).invoke(null, scheme);
      if ((Boolean) found.getClass().getMethod("isDefined").invoke(found)) {
        return (String) found.getClass().getMethod("get").invoke(found);
      }
      return (String) delegating.getMethod("defaultHDFSLogStoreClassName").invoke(null);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return DEFAULT_DELEGATE; // delta-spark's default for file, hdfs and unknown schemes
    }
  }

  private static Class<?> load(String name) throws ClassNotFoundException {
    ClassLoader context = Thread.currentThread().getContextClassLoader();
    if (context != null) {
      try {
        return Class.forName(name, true, context);
      } catch (ClassNotFoundException e) {
        // below: the loader of this class (spark.jars) sees delta-spark's classes too
      }
    }
    return Class.forName(name, true, LeaseFencedLogStore.class.getClassLoader());
  }

  // ------------------------------------------------------------------ everything else: delegated

  @Override
  public CloseableIterator<String> read(Path path, Configuration hadoopConf) throws IOException {
    return delegate(path, hadoopConf).read(path, hadoopConf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
    return delegate(path, hadoopConf).listFrom(path, hadoopConf);
  }

  @Override
  public Path resolvePathOnPhysicalStorage(Path path, Configuration hadoopConf) throws IOException {
    return delegate(path, hadoopConf).resolvePathOnPhysicalStorage(path, hadoopConf);
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) throws IOException {
    return delegate(path, hadoopConf).isPartialWriteVisible(path, hadoopConf);
  }

  @Override
  public String toString() {
    return "LeaseFencedLogStore(" + delegates + ")";
  }
}
