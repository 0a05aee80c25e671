import java.io.File;
import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * Test only: one name node and one data node in this JVM, their files under args[0].
 * Prints {@code hdfs://host:port} once up and stops when its standard input closes
 * (so it never outlives the test that started it).
 */
public final class MiniHdfs {
    public static void main(String[] args) throws IOException {
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(args[0]).getAbsolutePath());
        conf.setLong("dfs.blocksize", 1 << 20);
        conf.setInt("dfs.replication", 1);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true).build();
        try {
            cluster.waitActive();
            System.out.println("hdfs://localhost:" + cluster.getNameNodePort());
            System.out.flush();
            while (System.in.read() >= 0) {
                // wait for the test to close our input
            }
        } finally {
            cluster.shutdown();
        }
    }
}
