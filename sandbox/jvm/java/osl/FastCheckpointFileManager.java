package osl;

import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's FileContext-based checkpoint file manager, less two costs it pays on every file of
 * every micro-batch (set by sandbox/jvm/spark_session.py as spark.sql.streaming.checkpointFileManagerClass).
 *
 * <ul>
 * <li>Local files: without Hadoop's native library, RawLocalFileSystem forks a {@code chmod}
 * process for every file it creates and a {@code readlink} for both paths of every rename:
 * six processes per batch on the driver (offset log, commit log) and three per state
 * partition (its changelog). Here the temporary file is written with java.nio and moved with
 * one rename(2) when it may replace the target, or hard-linked then unlinked when it may not
 * (the link fails atomically if the target exists).
 * <li>S3A (the sink's {@code _spark_metadata} log): the temporary object, then a copy and a
 * delete, become one PUT when the stream closes; cancelling aborts the upload, so nothing is
 * ever visible half-written (what Spark's AbortableStreamBasedCheckpointFileManager does, but
 * by scheme: that class refuses the local checkpoint).
 * </ul>
 * Every other scheme and every other operation is Spark's own.
 */
public class FastCheckpointFileManager extends FileContextBasedCheckpointFileManager {
  private final String scheme;
  private final Configuration conf;

  public FastCheckpointFileManager(Path path, Configuration hadoopConf) {
    super(path, hadoopConf);
    this.conf = hadoopConf;
    String s = path.toUri().getScheme();
    if (s == null) {
      s = sneakyGet(() -> FileContext.getFileContext(path.toUri(), hadoopConf).getDefaultFileSystem().getUri().getScheme());
    }
    this.scheme = s;
  }

  /** The scheme this manager serves: "file", "s3a" or another (Spark's own behaviour). */
  public String scheme() {
    return scheme;
  }

  @Override
  public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    if (!"s3a".equals(scheme)) {
      return super.createAtomic(path, overwriteIfPossible);
    }
    FSDataOutputStream stream = sneakyGet(() -> path.getFileSystem(conf).create(path, overwriteIfPossible));
    return new CheckpointFileManager.CancellableFSDataOutputStream(stream) {
      private boolean done = false;

      @Override
      public void cancel() {
        if (done) return;
        done = true;
        stream.abort();
      }

      @Override
      public void close() throws IOException {
        if (done) return;
        done = true;
        stream.close();
      }
    };
  }

  @Override
  public FSDataOutputStream createTempFile(Path path) {
    if (!"file".equals(scheme)) {
      return super.createTempFile(path);
    }
    java.nio.file.Path file = Paths.get(path.toUri().getPath());
    return sneakyGet(() -> new FSDataOutputStream(
        Files.newOutputStream(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE),
        null));
  }

  @Override
  public void renameTempFile(Path srcPath, Path dstPath, boolean overwriteIfPossible) {
    if (!"file".equals(scheme)) {
      super.renameTempFile(srcPath, dstPath, overwriteIfPossible);
      return;
    }
    java.nio.file.Path src = Paths.get(srcPath.toUri().getPath());
    java.nio.file.Path dst = Paths.get(dstPath.toUri().getPath());
    try {
      if (overwriteIfPossible) {
        Files.move(src, dst, StandardCopyOption.ATOMIC_MOVE);
      } else {
        Files.createLink(dst, src);
        Files.delete(src);
      }
    } catch (java.nio.file.FileAlreadyExistsException e) {
      // the temporary file is of no use to anyone now (Hadoop's rename would leave it)
      sneakyGet(() -> Files.deleteIfExists(src));
      throw sneaky(new FileAlreadyExistsException("checkpoint file " + dstPath + " already exists"));
    } catch (AtomicMoveNotSupportedException | UnsupportedOperationException e) {
      super.renameTempFile(srcPath, dstPath, overwriteIfPossible);
    } catch (FileSystemException e) {
      if (!overwriteIfPossible && Files.exists(src) && !Files.exists(dst)) {
        // a file system without hard links: Spark's own rename
        super.renameTempFile(srcPath, dstPath, overwriteIfPossible);
      } else {
        throw sneaky(e);
      }
    } catch (IOException e) {
      throw sneaky(e);
    }
  }

  interface IOSupplier<T> {
    T get() throws IOException;
  }

  private static <T> T sneakyGet(IOSupplier<T> f) {
    try {
      return f.get();
    } catch (IOException e) {
      throw sneaky(e);
    }
  }

  // Spark declares no checked exceptions in Scala; its callers catch Hadoop's IOExceptions
  // (FileAlreadyExistsException above all), so they are thrown as they are, not wrapped.
  @SuppressWarnings("unchecked")
  private static <E extends Throwable> RuntimeException sneaky(Throwable e) throws E {
    throw (E) e;
  }
}
