package occflow.iceberg;

import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;

/**
 * A table's operations with the lease checked inside {@link #commit}: every snapshot a table
 * loaded through {@link LeaseFencedCatalog} commits (append, overwrite, row delta, a transaction)
 * reaches the catalog through this method, after its data and manifests are written. Everything
 * else is the catalog's own operations, unchanged.
 */
final class LeaseFencedOperations implements TableOperations {
  private final TableOperations delegate;
  private final LeaseCheck window;
  private final String table;

  LeaseFencedOperations(TableOperations delegate, LeaseCheck window, String table) {
    this.delegate = delegate;
    this.window = window;
    this.table = table;
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    window.check(table);
    delegate.commit(base, metadata);
  }

  @Override
  public TableMetadata current() {
    return delegate.current();
  }

  @Override
  public TableMetadata refresh() {
    return delegate.refresh();
  }

  @Override
  public FileIO io() {
    return delegate.io();
  }

  @Override
  public EncryptionManager encryption() {
    return delegate.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return delegate.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return delegate.locationProvider();
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    return delegate.temp(uncommittedMetadata); // staging only: its commit is not the table's
  }

  @Override
  public long newSnapshotId() {
    return delegate.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return delegate.requireStrictCleanup();
  }
}
