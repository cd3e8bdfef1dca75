/*
 * A parquet-mr KMS client over rotsink's key ring, so that Spark's own Parquet reader
 * decrypts the files rotsink writes with commit_protocol/crypto/parquet.py (and so that
 * Spark can write files rotsink reads).
 *
 * Master keys come from the Hadoop property parquet.encryption.key.list, in the format of
 * parquet-mr's InMemoryKMS: "id1:base64key1, id2:base64key2". Data keys are wrapped and
 * unwrapped locally, exactly as InMemoryKMS does it: KeyToolkit.encryptKeyLocally with the
 * key id's UTF-8 bytes as AAD, i.e. base64(nonce[12] || AES-GCM ciphertext || tag[16]).
 *
 * No key bytes ever appear in an exception message or a log line: errors name key ids only.
 *
 * Build: datasource/spark/kms_jar.py (build_kms_jar) compiles this file against Spark's jars.
 */
package io.rotsink.kms;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.parquet.crypto.KeyAccessDeniedException;
import org.apache.parquet.crypto.ParquetCryptoRuntimeException;
import org.apache.parquet.crypto.keytools.KeyToolkit;
import org.apache.parquet.crypto.keytools.KmsClient;

public class RotsinkKeyRingKms implements KmsClient {

  /** The Hadoop property holding the ring, named as parquet-mr's InMemoryKMS names it. */
  public static final String KEY_LIST_PROPERTY_NAME = "parquet.encryption.key.list";

  // Immutable after initialize(); parquet-mr caches one client per access token and KMS
  // instance and may call it from several task threads at once.
  private volatile Map<String, byte[]> masterKeys = Collections.emptyMap();

  @Override
  public void initialize(Configuration configuration, String kmsInstanceID,
      String kmsInstanceURL, String accessToken) throws KeyAccessDeniedException {
    String[] entries = configuration.getTrimmedStrings(KEY_LIST_PROPERTY_NAME);
    if (entries == null || entries.length == 0) {
      throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: the Hadoop property "
          + KEY_LIST_PROPERTY_NAME + " is empty; expected \"id1:base64key1, id2:base64key2\"");
    }
    masterKeys = Collections.unmodifiableMap(parseKeyList(entries));
  }

  /** Parses "id:base64key" entries; messages name the entry's position or id, never a key. */
  static Map<String, byte[]> parseKeyList(String[] entries) {
    Map<String, byte[]> keys = new TreeMap<>();
    for (int i = 0; i < entries.length; i++) {
      int colon = entries[i].indexOf(':');
      if (colon <= 0) {
        throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: entry " + (i + 1)
            + " of " + KEY_LIST_PROPERTY_NAME + " has no key id; expected \"id:base64key\"");
      }
      String keyId = entries[i].substring(0, colon).trim();
      byte[] key = decodeKey(keyId, entries[i].substring(colon + 1).trim());
      if (keys.put(keyId, key) != null) {
        throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: key id '" + keyId
            + "' appears twice in " + KEY_LIST_PROPERTY_NAME);
      }
    }
    return keys;
  }

  private static byte[] decodeKey(String keyId, String encoded) {
    byte[] key;
    try {
      key = Base64.getDecoder().decode(encoded);
    } catch (IllegalArgumentException e) {
      // The decoder's message may quote the offending character; do not chain it.
      throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: the key for id '" + keyId
          + "' in " + KEY_LIST_PROPERTY_NAME + " is not standard base64");
    }
    if (key.length != 16 && key.length != 24 && key.length != 32) {
      throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: the key for id '" + keyId
          + "' is " + key.length + " bytes; expected 32 (AES-256), or 16 or 24");
    }
    return key;
  }

  @Override
  public String wrapKey(byte[] keyBytes, String masterKeyIdentifier)
      throws KeyAccessDeniedException {
    byte[] aad = masterKeyIdentifier.getBytes(StandardCharsets.UTF_8);
    return KeyToolkit.encryptKeyLocally(keyBytes, masterKey(masterKeyIdentifier), aad);
  }

  @Override
  public byte[] unwrapKey(String wrappedKey, String masterKeyIdentifier)
      throws KeyAccessDeniedException {
    byte[] masterKey = masterKey(masterKeyIdentifier);
    byte[] aad = masterKeyIdentifier.getBytes(StandardCharsets.UTF_8);
    try {
      return KeyToolkit.decryptKeyLocally(wrappedKey, masterKey, aad);
    } catch (ParquetCryptoRuntimeException | IllegalArgumentException e) {
      throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: the master key for id '"
          + masterKeyIdentifier + "' in " + KEY_LIST_PROPERTY_NAME + " does not decrypt this"
          + " file: it was written with a different key under the same id (or its key"
          + " material is corrupt)", e);
    }
  }

  private byte[] masterKey(String masterKeyIdentifier) {
    byte[] key = masterKeys.get(masterKeyIdentifier);
    if (key == null) {
      throw new ParquetCryptoRuntimeException("RotsinkKeyRingKms: master key id '"
          + masterKeyIdentifier + "' is not in " + KEY_LIST_PROPERTY_NAME + "; it holds "
          + masterKeys.keySet());
    }
    return key;
  }
}
