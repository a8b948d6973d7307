package io.deltamq.spark;

import io.delta.storage.LocalLogStore;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * Delta's local-file-system log store, with a listing that does not read the whole log directory.
 *
 * <p>Delta lists {@code _delta_log} from the last checkpoint's version on every snapshot update,
 * and on a local file system that means listing (and stat-ing) every entry of the directory and
 * keeping those at or after the start. A DeltaMQ journal commits up to hundreds of times a second,
 * so the directory holds tens of thousands of entries within its log retention, and each Spark
 * query spent seconds listing them. This store looks up the files it needs by name instead:
 * {@code <version>.json}, {@code <version>.checkpoint.parquet} and {@code <version>.crc}, version
 * after version from the start, until a version has neither commit nor checkpoint.
 *
 * <p>It falls back to the full listing whenever that could miss something: when the start is not
 * a versioned file, when nothing exists at the start version, or when the table's
 * {@code _last_checkpoint} names a multi-part or V2 checkpoint (whose file names cannot be guessed).
 */
public class SequentialLocalLogStore extends LocalLogStore {

    private static final Pattern VERSIONED = Pattern.compile("^(\\d{20})\\..*");
    private static final String[] SUFFIXES = {".json", ".checkpoint.parquet", ".crc"};

    public SequentialLocalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        Matcher versioned = VERSIONED.matcher(path.getName());
        Path logDir = path.getParent();
        String scheme = path.toUri().getScheme();
        if (!versioned.matches() || logDir == null || (scheme != null && !scheme.equals("file"))) {
            return super.listFrom(path, hadoopConf);
        }
        File dir = new File(logDir.toUri().getPath());
        if (!dir.isDirectory()) {
            throw new FileNotFoundException("No such file or directory: " + logDir);
        }
        if (unusualCheckpoint(new File(dir, "_last_checkpoint"))) {
            return super.listFrom(path, hadoopConf);
        }
        String startName = path.getName();
        List<FileStatus> found = new ArrayList<>();
        for (long version = Long.parseLong(versioned.group(1)); ; version++) {
            String prefix = String.format("%020d", version);
            boolean present = false;
            for (String suffix : SUFFIXES) {
                File file = new File(dir, prefix + suffix);
                long modified = file.lastModified();             // 0 when the file does not exist
                if (modified == 0L && !file.exists()) {
                    continue;
                }
                if (!suffix.equals(".crc")) {
                    present = true;
                }
                if (file.getName().compareTo(startName) >= 0) {
                    found.add(new FileStatus(file.length(), false, 1, 0, modified,
                                             new Path(logDir, file.getName())));
                }
            }
            if (!present) {
                break;
            }
        }
        if (found.isEmpty()) {
            return super.listFrom(path, hadoopConf);           // e.g. listing from version 0 of a cleaned log
        }
        found.sort(Comparator.comparing(status -> status.getPath().getName()));
        return found.iterator();
    }

    private static boolean unusualCheckpoint(File lastCheckpoint) {
        try {
            String text = new String(Files.readAllBytes(lastCheckpoint.toPath()), StandardCharsets.UTF_8);
            return text.contains("\"parts\"") || text.contains("\"v2Checkpoint\"");
        } catch (IOException noCheckpointYet) {
            return false;
        }
    }
}
