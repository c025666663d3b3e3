package occflow.iceberg;

import java.io.Closeable;
import java.io.IOException;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import occflow.lease.LeaseWindow;
import org.apache.hadoop.conf.Configurable;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.SortOrder;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.catalog.ViewCatalog;
import org.apache.iceberg.exceptions.NoSuchViewException;
import org.apache.iceberg.hadoop.HadoopCatalog;
import org.apache.iceberg.view.View;
import org.apache.iceberg.view.ViewBuilder;

/**
 * The Iceberg catalog occflow configures (JDBC, Hadoop, Hive, REST or a custom one), with the
 * spark-submit driver's lease checked inside every table commit (issue 23).
 *
 * <p>Set as a Spark catalog's {@code catalog-impl}; the catalog it wraps is named by {@code
 * occflow.delegate.catalog-impl} or {@code occflow.delegate.type} (neither: Iceberg's default,
 * Hive) and built by Iceberg from the same properties. Tables it loads are the catalog's own
 * {@link BaseTable}s with {@link LeaseFencedOperations}; create and replace transactions are
 * {@link LeaseFencedTransaction}s; drop, rename and register are checked first. Namespaces and
 * views pass through unchecked (they hold no table data).
 *
 * <p>Which window a commit checks is the catalog's {@code occflow.lease.scope}: {@code catalog}
 * (the default; a spark-submit driver runs one write, whose window the catalog's own properties
 * name) or {@code thread} (an in-process session that every write of the process shares: the
 * window of the attempt the committing thread runs, {@link occflow.lease.AttemptWindow}).
 */
public class LeaseFencedCatalog
    implements Catalog, SupportsNamespaces, ViewCatalog, Configurable, Closeable {
  public static final String DELEGATE_IMPL = "occflow.delegate.catalog-impl";
  public static final String DELEGATE_TYPE = "occflow.delegate.type";
  public static final String SCOPE = "occflow.lease.scope";
  public static final String SCOPE_CATALOG = "catalog";
  public static final String SCOPE_THREAD = "thread";

  private String name;
  private Catalog delegate;
  private LeaseCheck window;
  private String fenceText;
  private Configuration conf;

  @Override
  public void setConf(Configuration conf) {
    this.conf = conf;
  }

  @Override
  public Configuration getConf() {
    return conf;
  }

  @Override
  public void initialize(String catalogName, Map<String, String> properties) {
    this.name = catalogName;
    String scope = properties.getOrDefault(SCOPE, SCOPE_CATALOG);
    if (SCOPE_THREAD.equals(scope)) {
      this.window = LeaseCheck.attempt();
      this.fenceText = "the committing thread's attempt window";
    } else if (SCOPE_CATALOG.equals(scope)) {
      LeaseWindow own = LeaseWindow.fromProperties(catalogName, properties);
      this.window = LeaseCheck.of(own);
      this.fenceText = "fence " + own.fence();
    } else {
      throw new IllegalArgumentException(
          String.format(
              "occflow's lease-fenced catalog %s: %s must be %s or %s, got %s",
              catalogName, SCOPE, SCOPE_CATALOG, SCOPE_THREAD, scope));
    }
    Map<String, String> own = new HashMap<>();
    properties.forEach(
        (key, value) -> {
          String lower = key.toLowerCase(Locale.ROOT);
          if (!lower.startsWith("occflow.") && !lower.equals("catalog-impl") && !lower.equals("type")) {
            own.put(key, value);
          }
        });
    if (properties.get(DELEGATE_IMPL) != null) {
      own.put("catalog-impl", properties.get(DELEGATE_IMPL));
    }
    if (properties.get(DELEGATE_TYPE) != null) {
      own.put(CatalogUtil.ICEBERG_CATALOG_TYPE, properties.get(DELEGATE_TYPE));
    }
    this.delegate = CatalogUtil.buildIcebergCatalog(catalogName, own, conf);
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public String toString() {
    return "LeaseFencedCatalog(" + delegate + ", " + fenceText + ")";
  }

  private Table fenced(Table table) {
    // Metadata tables (t.snapshots, ...) are read-only and not BaseTable: left as they are.
    if (table == null || table.getClass() != BaseTable.class) {
      return table;
    }
    BaseTable base = (BaseTable) table;
    return new BaseTable(
        new LeaseFencedOperations(base.operations(), window, base.name()), base.name(), base.reporter());
  }

  // ------------------------------------------------------------------ tables: checked

  @Override
  public Table loadTable(TableIdentifier identifier) {
    return fenced(delegate.loadTable(identifier));
  }

  @Override
  public TableBuilder buildTable(TableIdentifier identifier, Schema schema) {
    return new FencedBuilder(delegate.buildTable(identifier, schema), identifier.toString());
  }

  @Override
  public Table registerTable(TableIdentifier identifier, String metadataFileLocation) {
    window.check(identifier.toString());
    return fenced(delegate.registerTable(identifier, metadataFileLocation));
  }

  @Override
  public boolean dropTable(TableIdentifier identifier, boolean purge) {
    window.check(identifier.toString());
    return delegate.dropTable(identifier, purge);
  }

  @Override
  public void renameTable(TableIdentifier from, TableIdentifier to) {
    window.check(from.toString());
    delegate.renameTable(from, to);
  }

  @Override
  public List<TableIdentifier> listTables(Namespace namespace) {
    return delegate.listTables(namespace);
  }

  @Override
  public boolean tableExists(TableIdentifier identifier) {
    return delegate.tableExists(identifier);
  }

  @Override
  public void invalidateTable(TableIdentifier identifier) {
    delegate.invalidateTable(identifier);
  }

  private final class FencedBuilder implements TableBuilder {
    private final TableBuilder builder;
    private final String table;

    FencedBuilder(TableBuilder builder, String table) {
      this.builder = builder;
      this.table = table;
    }

    @Override
    public TableBuilder withPartitionSpec(PartitionSpec spec) {
      builder.withPartitionSpec(spec);
      return this;
    }

    @Override
    public TableBuilder withSortOrder(SortOrder sortOrder) {
      builder.withSortOrder(sortOrder);
      return this;
    }

    @Override
    public TableBuilder withLocation(String location) {
      builder.withLocation(location);
      return this;
    }

    @Override
    public TableBuilder withProperties(Map<String, String> properties) {
      builder.withProperties(properties);
      return this;
    }

    @Override
    public TableBuilder withProperty(String key, String value) {
      builder.withProperty(key, value);
      return this;
    }

    @Override
    public Table create() {
      window.check(table); // creating the table is its first commit
      return fenced(builder.create());
    }

    @Override
    public Transaction createTransaction() {
      return new LeaseFencedTransaction(builder.createTransaction(), window, table);
    }

    @Override
    public Transaction replaceTransaction() {
      return new LeaseFencedTransaction(builder.replaceTransaction(), window, table);
    }

    @Override
    public Transaction createOrReplaceTransaction() {
      return new LeaseFencedTransaction(builder.createOrReplaceTransaction(), window, table);
    }
  }

  // ------------------------------------------------------------------ namespaces: passed through

  private SupportsNamespaces namespaces() {
    if (delegate instanceof SupportsNamespaces) {
      return (SupportsNamespaces) delegate;
    }
    throw new UnsupportedOperationException("Namespaces are not supported by catalog: " + delegate);
  }

  @Override
  public void createNamespace(Namespace namespace, Map<String, String> metadata) {
    // Spark adds "owner", which a Hadoop catalog refuses; SparkCatalog drops it for a Hadoop
    // catalog it can see, and it sees this one.
    if (delegate instanceof HadoopCatalog && Set.of("owner").equals(metadata.keySet())) {
      metadata = Collections.emptyMap();
    }
    namespaces().createNamespace(namespace, metadata);
  }

  @Override
  public List<Namespace> listNamespaces(Namespace namespace) {
    return namespaces().listNamespaces(namespace);
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(Namespace namespace) {
    return namespaces().loadNamespaceMetadata(namespace);
  }

  @Override
  public boolean dropNamespace(Namespace namespace) {
    return namespaces().dropNamespace(namespace);
  }

  @Override
  public boolean setProperties(Namespace namespace, Map<String, String> properties) {
    return namespaces().setProperties(namespace, properties);
  }

  @Override
  public boolean removeProperties(Namespace namespace, Set<String> properties) {
    return namespaces().removeProperties(namespace, properties);
  }

  @Override
  public boolean namespaceExists(Namespace namespace) {
    return namespaces().namespaceExists(namespace);
  }

  // ------------------------------------------------------------------ views: passed through

  private ViewCatalog views() {
    return delegate instanceof ViewCatalog ? (ViewCatalog) delegate : null;
  }

  @Override
  public List<TableIdentifier> listViews(Namespace namespace) {
    return views() == null ? Collections.emptyList() : views().listViews(namespace);
  }

  @Override
  public View loadView(TableIdentifier identifier) {
    if (views() == null) {
      throw new NoSuchViewException("View does not exist: %s", identifier);
    }
    return views().loadView(identifier);
  }

  @Override
  public boolean viewExists(TableIdentifier identifier) {
    return views() != null && views().viewExists(identifier);
  }

  @Override
  public ViewBuilder buildView(TableIdentifier identifier) {
    if (views() == null) {
      throw new UnsupportedOperationException("Views are not supported by catalog: " + delegate);
    }
    return views().buildView(identifier);
  }

  @Override
  public boolean dropView(TableIdentifier identifier) {
    return views() != null && views().dropView(identifier);
  }

  @Override
  public void renameView(TableIdentifier from, TableIdentifier to) {
    if (views() == null) {
      throw new UnsupportedOperationException("Views are not supported by catalog: " + delegate);
    }
    views().renameView(from, to);
  }

  @Override
  public void invalidateView(TableIdentifier identifier) {
    if (views() != null) {
      views().invalidateView(identifier);
    }
  }

  @Override
  public void close() throws IOException {
    if (delegate instanceof Closeable) {
      ((Closeable) delegate).close();
    }
  }
}
