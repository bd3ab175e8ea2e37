/*
 * CPU tests of the embedded kernel images: every row decompresses to an image that matches its hash
 * (FNV-1a, checked on known values) and its own description (ELF for cubins whose parameter table, and
 * PTX whose .entry, takes exactly the parameters the kernel source declares), and a damaged image is
 * refused before the driver could see it. The images come from the build tree (build/generated), so
 * these tests check what this build actually embeds. The table as a whole is tests/test_kernel_table.c;
 * the families both check against, tests/kernel_families.h.
 */
#include "kernel_families.h"

static void test_hash_function_known_values(void) {
  /* Published FNV-1a 64 test vectors. */
  CHECK(aotk__fnv1a64("", 0) == 0xcbf29ce484222325ull);
  CHECK(aotk__fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
  CHECK(aotk__fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
}

/* ---- each image ----------------------------------------------------------------------------- */

/* A kernel's .entry parameters as the launcher passes them, from its kinds: each one's size in bytes
 * and the alignment the parameter space gives it. A 't' is seven: the 128-byte map (".align 64"),
 * then the view's shape (3 x 4 bytes) and strides (3 x 8 bytes). Then Triton's two hidden pointers.
 * Returns how many, or -1 if the kinds hold an unknown letter or too many. */
enum { MAX_ENTRY_PARAMS = 96, TMA_MAP_BYTES = 128, TMA_MAP_ALIGNMENT = 64, TMA_RANK = 3 };
typedef struct entry_param {
  char kind; /* the kind it comes from ('p' for the hidden pointers) */
  int part;  /* within a 't': 0 the map, 1-3 the shape, 4-6 the strides; 0 otherwise */
  int bytes, alignment;
} entry_param;

static int expected_entry_params(const char *param_kinds, entry_param out[MAX_ENTRY_PARAMS]) {
  int count = 0;
  size_t kinds = strlen(param_kinds);
  for (size_t k = 0; k < kinds + HIDDEN_PARAMS; k++) {
    char kind = k < kinds ? param_kinds[k] : 'p';
    int parts = kind == 't' ? 1 + 2 * TMA_RANK : 1;
    if (count + parts > MAX_ENTRY_PARAMS) return -1;
    for (int part = 0; part < parts; part++) {
      entry_param *e = &out[count++];
      e->kind = kind;
      e->part = part;
      switch (kind) {
        case 'p':
        case 'l':
          e->bytes = e->alignment = 8;
          break;
        case 'i':
        case 'f':
          e->bytes = e->alignment = 4;
          break;
        case 't':
          e->bytes = part == 0 ? TMA_MAP_BYTES : part <= TMA_RANK ? 4 : 8;
          e->alignment = part == 0 ? TMA_MAP_ALIGNMENT : e->bytes;
          break;
        default:
          return -1;
      }
    }
  }
  return count;
}

/* Cubins per family whose .nv.info parameter table is exactly the family's parameters. */
static int cubin_entries_matching[FAMILY_COUNT];

static uint16_t read_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t read_u32(const unsigned char *p) { return (uint32_t)read_u16(p) | (uint32_t)read_u16(p + 2) << 16; }
static uint64_t read_u64(const unsigned char *p) { return (uint64_t)read_u32(p) | (uint64_t)read_u32(p + 4) << 32; }

/* The cubin's own record of the kernel's parameters: the section ".nv.info.<function>" holds one
 * EIATTR_KPARAM_INFO attribute per parameter (ordinal, offset in the parameter space, and size in the
 * top 14 bits of its last word), and EIATTR_PARAM_CBANK where that space starts in its constant bank
 * (alignments hold there: the kernel reads a map in place). Each must be what the launcher packs: this
 * is the check of the sm_90 rows, which embed no PTX, and so of the TMA kernels' descriptors (a
 * 128-byte, 64-aligned map, then 3 x 4 and 3 x 8 bytes). */
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };
enum { EIATTR_PARAM_CBANK = 0x0a, EIATTR_KPARAM_INFO = 0x17 };
static void check_cubin_parameters(int row, const unsigned char *elf, size_t bytes) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  const uint64_t section_headers = read_u64(elf + 0x28);
  const uint16_t header_size = read_u16(elf + 0x3a), sections = read_u16(elf + 0x3c), names = read_u16(elf + 0x3e);
  bool headers_fit = header_size >= 64 && names < sections && section_headers <= bytes &&
                     (uint64_t)sections * header_size <= bytes - section_headers;
  CHECK_MSG(headers_fit, "row %d sm_%d %s: the cubin's section headers lie outside it", row, e->arch, e->name);
  if (!headers_fit) return;
  const unsigned char *names_header = elf + section_headers + (size_t)names * header_size;
  const uint64_t names_offset = read_u64(names_header + 0x18), names_size = read_u64(names_header + 0x20);
  CHECK_MSG(names_offset <= bytes && names_size <= bytes - names_offset, "row %d %s: the section names lie outside",
            row, e->name);
  if (names_offset > bytes || names_size > bytes - names_offset) return;
  char wanted[160];
  snprintf(wanted, sizeof wanted, ".nv.info.%s", e->function_name);
  const unsigned char *info = NULL;
  uint64_t info_size = 0;
  for (int i = 0; i < sections; i++) {
    const unsigned char *header = elf + section_headers + (size_t)i * header_size;
    uint32_t name = read_u32(header);
    if (name >= names_size) continue;
    const char *section_name = (const char *)elf + names_offset + name;
    if (memchr(section_name, '\0', names_size - name) == NULL || strcmp(section_name, wanted) != 0) {
      continue;
    }
    uint64_t offset = read_u64(header + 0x18), size = read_u64(header + 0x20);
    if (offset <= bytes && size <= bytes - offset) info = elf + offset, info_size = size;
  }
  CHECK_MSG(info != NULL, "row %d sm_%d %s: the cubin has no %s section", row, e->arch, e->name, wanted);
  if (info == NULL) return;

  const struct family *family = family_of(e);
  entry_param expected[MAX_ENTRY_PARAMS];
  int expected_count = expected_entry_params(family != NULL ? family->param_kinds : e->param_kinds, expected);
  CHECK_MSG(expected_count > 0, "row %d %s: cannot expand its parameter kinds", row, e->name);
  if (expected_count <= 0) return;
  /* First the attributes: each parameter's offset and size, and where the parameters start in their
   * constant bank (EIATTR_PARAM_CBANK: section, offset, size), which the alignments are relative to. */
  int offsets[MAX_ENTRY_PARAMS], sizes[MAX_ENTRY_PARAMS];
  bool seen[MAX_ENTRY_PARAMS] = {false};
  int found = 0, mismatches = 0;
  long bank_offset = -1;
  for (uint64_t at = 0; at + 4 <= info_size;) {
    const unsigned char *attribute = info + at;
    uint64_t length = attribute[0] == EIFMT_SVAL ? 4u + read_u16(attribute + 2) : 4u;
    bool known_format = attribute[0] >= EIFMT_NVAL && attribute[0] <= EIFMT_SVAL;
    CHECK_MSG(known_format && at + length <= info_size, "row %d %s: %s attribute at %llu: format %d, %llu bytes", row,
              e->name, wanted, (unsigned long long)at, attribute[0], (unsigned long long)length);
    if (!known_format || at + length > info_size) return;
    if (attribute[0] == EIFMT_SVAL && attribute[1] == EIATTR_PARAM_CBANK && length >= 12) {
      bank_offset = read_u16(attribute + 8);
    } else if (attribute[0] == EIFMT_SVAL && attribute[1] == EIATTR_KPARAM_INFO && length >= 16) {
      const int ordinal = read_u16(attribute + 8);
      found++;
      CHECK_MSG(ordinal < expected_count && !seen[ordinal],
                "row %d sm_%d %s: parameter %d is past the %d expected, or listed twice", row, e->arch, e->name,
                ordinal, expected_count);
      if (ordinal < expected_count && !seen[ordinal]) {
        seen[ordinal] = true;
        offsets[ordinal] = read_u16(attribute + 10);
        sizes[ordinal] = (int)(read_u32(attribute + 12) >> 18);
      } else {
        mismatches++;
      }
    }
    at += length;
  }
  CHECK_MSG(found == expected_count, "row %d sm_%d %s: the cubin lists %d parameters, expected %d", row, e->arch,
            e->name, found, expected_count);
  CHECK_MSG(bank_offset >= 0, "row %d sm_%d %s: no EIATTR_PARAM_CBANK", row, e->arch, e->name);
  for (int i = 0; i < expected_count && bank_offset >= 0; i++) {
    if (!seen[i]) continue;
    const entry_param *x = &expected[i];
    bool matches = sizes[i] == x->bytes && (bank_offset + offsets[i]) % x->alignment == 0;
    CHECK_MSG(matches, "row %d sm_%d %s: parameter %d (kind '%c', part %d) is %d bytes at %ld + %d, expected %d bytes "
              "aligned to %d", row, e->arch, e->name, i, x->kind, x->part, sizes[i], bank_offset, offsets[i],
              x->bytes, x->alignment);
    mismatches += !matches;
  }
  if (bank_offset < 0) mismatches++;
  if (family != NULL && found == expected_count && mismatches == 0) cubin_entries_matching[family - families]++;
}

static void check_cubin(int row) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  CHECK_MSG(e->cubin.data != NULL && e->cubin.raw_bytes > 0, "row %d sm_%d %s: no cubin", row, e->arch, e->name);
  unsigned char *raw = (unsigned char *)1; /* decompress must set it, also on failure */
  aotk_status status = aotk__image_decompress(&e->cubin, e->name, &raw);
  CHECK_MSG(status == AOTK_OK, "row %d sm_%d %s cubin: %s (%s)", row, e->arch, e->name, aotk_status_name(status),
            aotk_last_error());
  if (status != AOTK_OK) {
    CHECK(raw == NULL);
    return;
  }
  CHECK_MSG(fnv1a64(raw, e->cubin.raw_bytes) == e->cubin.hash, "row %d sm_%d %s: cubin hash differs", row, e->arch,
            e->name);
  CHECK_MSG(e->cubin.raw_bytes >= 64 && memcmp(raw, "\x7f" "ELF", 4) == 0, "row %d sm_%d %s: cubin is not ELF",
            row, e->arch, e->name);
  if (e->cubin.raw_bytes >= 64) {
    uint16_t machine;
    memcpy(&machine, raw + 18, sizeof machine); /* e_machine; cubins are little-endian */
    CHECK_MSG(raw[4] == ELF_CLASS_64 && machine == ELF_MACHINE_CUDA, "row %d sm_%d %s: ELF class %d, machine %u",
              row, e->arch, e->name, raw[4], (unsigned)machine);
    /* In the CUDA ELF ABI version 7 (what ptxas 12.x writes) the low byte of e_flags is the SM. Other
     * versions lay e_flags out differently; the test does not guess at them. */
    if (raw[8] == 7) {
      uint32_t flags;
      memcpy(&flags, raw + 48, sizeof flags);
      CHECK_MSG((int)(flags & 0xffu) == e->arch, "row %d sm_%d %s: the cubin targets sm_%u", row, e->arch, e->name,
                flags & 0xffu);
    }
    if (raw[4] == ELF_CLASS_64 && machine == ELF_MACHINE_CUDA) check_cubin_parameters(row, raw, e->cubin.raw_bytes);
  }
  free(raw);
}

/* PTX images per family whose .entry took exactly the family's parameters. */
static int ptx_entries_matching[FAMILY_COUNT];

static const char *ptx_param_spelling(const entry_param *x) {
  if (x->kind == 't' && x->part == 0) return ".align 64 .b8 <name>[128]";
  return x->bytes == 8 ? ".u64" : x->kind == 'f' ? ".f32" : ".u32";
}

static bool followed_by_space(const char *text, const char *word) {
  size_t length = strlen(word);
  return strncmp(text, word, length) == 0 && (text[length] == ' ' || text[length] == '\t');
}

/* One .entry parameter's declaration (the text after ".param "): ".u64 name", ".u32 name", ".f32 name",
 * or a TMA descriptor's map, ".align 64 .b8 name[128]". */
static bool ptx_param_matches(const char *type, const entry_param *x) {
  if (x->kind == 't' && x->part == 0) {
    if (!followed_by_space(type, ".align")) return false;
    char *rest;
    long alignment = strtol(type + strlen(".align"), &rest, 10);
    while (*rest == ' ' || *rest == '\t') rest++;
    if (alignment != TMA_MAP_ALIGNMENT || !followed_by_space(rest, ".b8")) return false;
    rest += strlen(".b8");
    while (*rest == ' ' || *rest == '\t') rest++;
    while ((*rest >= 'a' && *rest <= 'z') || (*rest >= 'A' && *rest <= 'Z') || (*rest >= '0' && *rest <= '9') ||
           *rest == '_' || *rest == '$') {
      rest++;
    }
    return *rest == '[' && strtol(rest + 1, &rest, 10) == TMA_MAP_BYTES && *rest == ']';
  }
  return followed_by_space(type, ptx_param_spelling(x));
}

/* The text between ".entry <name>(" and its ")", as the list of parameter declarations; checks
 * each one's type against the kinds the launcher packs. */
static void check_ptx_parameters(int row, const char *ptx) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  char entry[160];
  snprintf(entry, sizeof entry, ".entry %s(", e->function_name);
  const char *start = strstr(ptx, entry);
  CHECK_MSG(start != NULL, "row %d %s: the PTX has no \"%s\"", row, e->name, entry);
  if (start == NULL) return;
  CHECK_MSG(strstr(start + 1, entry) == NULL, "row %d %s: the PTX has two \"%s\"", row, e->name, entry);
  start += strlen(entry);
  const char *end = strchr(start, ')');
  CHECK_MSG(end != NULL, "row %d %s: the .entry's parameter list never closes", row, e->name);
  if (end == NULL) return;

  /* The family's list as this test writes it (the row's own is compared with it above); a row of an
   * unknown family is checked against what it claims. */
  const struct family *family = family_of(e);
  const char *param_kinds = family != NULL ? family->param_kinds : e->param_kinds;
  entry_param expected[MAX_ENTRY_PARAMS];
  int expected_count = expected_entry_params(param_kinds, expected);
  CHECK_MSG(expected_count > 0, "row %d %s: cannot expand its parameter kinds \"%s\"", row, e->name, param_kinds);
  if (expected_count <= 0) return;
  int count = 0;
  bool all_match = true;
  for (const char *p = start; (p = strstr(p, ".param")) != NULL && p < end; p += strlen(".param")) {
    const char *type = p + strlen(".param");
    while (*type == ' ' || *type == '\t') type++;
    if (count < expected_count) {
      bool type_matches = ptx_param_matches(type, &expected[count]);
      CHECK_MSG(type_matches, "row %d %s: parameter %d (kind '%c', part %d) is declared \"%.40s\", expected %s", row,
                e->name, count, expected[count].kind, expected[count].part, type, ptx_param_spelling(&expected[count]));
      all_match = all_match && type_matches;
    }
    count++;
  }
  CHECK_MSG(count == expected_count, "row %d %s: the .entry has %d parameters, expected %d (\"%s\" + %d hidden)", row,
            e->name, count, expected_count, param_kinds, HIDDEN_PARAMS);
  if (family != NULL && count == expected_count && all_match) ptx_entries_matching[family - families]++;

  /* Triton pins the block size in the PTX; the launcher's 32 * num_warps must agree with it. */
  const char *reqntid = strstr(end, ".reqntid");
  if (reqntid != NULL) {
    long threads = strtol(reqntid + strlen(".reqntid"), NULL, 10);
    CHECK_MSG(threads == 32L * e->num_warps, "row %d %s: .reqntid %ld but num_warps %d", row, e->name, threads,
              e->num_warps);
  }
}

static void check_ptx(int row) {
  const aotk__kernel_entry *e = &aotk__kernel_table[row];
  CHECK_MSG(e->ptx.data != NULL && e->ptx.raw_bytes > 0, "row %d sm_80 %s: no PTX", row, e->name);
  unsigned char *raw = NULL;
  aotk_status status = aotk__image_decompress(&e->ptx, e->name, &raw);
  CHECK_MSG(status == AOTK_OK, "row %d sm_80 %s PTX: %s (%s)", row, e->name, aotk_status_name(status),
            aotk_last_error());
  if (status != AOTK_OK) return;
  CHECK_MSG(fnv1a64(raw, e->ptx.raw_bytes) == e->ptx.hash, "row %d %s: PTX hash differs", row, e->name);
  /* The driver reads PTX as a C string: it must end in its NUL and hold no other. */
  bool terminated = raw[e->ptx.raw_bytes - 1] == '\0';
  CHECK_MSG(terminated, "row %d %s: the PTX's last byte is %d, not NUL", row, e->name, raw[e->ptx.raw_bytes - 1]);
  if (terminated) {
    const char *ptx = (const char *)raw;
    CHECK_MSG(strlen(ptx) == e->ptx.raw_bytes - 1, "row %d %s: a NUL at byte %zu of %u", row, e->name, strlen(ptx),
              e->ptx.raw_bytes);
    const char *target = strstr(ptx, ".target sm_80");
    CHECK_MSG(target != NULL && (target[13] == '\n' || target[13] == ' ' || target[13] == ','),
              "row %d %s: the PTX does not target plain sm_80", row, e->name);
    check_ptx_parameters(row, ptx);
  }
  free(raw);
}

static void test_every_image_decompresses_and_matches_its_row(void) {
  int cubins = 0, ptxs = 0;
  for (int row = 0; row < aotk__kernel_count; row++) {
    const aotk__kernel_entry *e = &aotk__kernel_table[row];
    check_cubin(row);
    cubins++;
    if (e->arch == 80) {
      check_ptx(row);
      ptxs++;
    } else {
      /* sm_90a PTX would serve no GPU (it is not forward compatible), so none is embedded. */
      CHECK_MSG(e->ptx.raw_bytes == 0 && e->ptx.data == NULL, "row %d sm_%d %s: has a %u-byte PTX", row, e->arch,
                e->name, e->ptx.raw_bytes);
    }
  }
  printf("    %d cubins, %d PTX images checked\n", cubins, ptxs);
  /* Every family's PTX was parsed: a family whose .entry the parser never matched would pass unseen. */
  for (int f = 0; f < FAMILY_COUNT; f++) {
    int sm80_rows = 0;
    for (int row = 0; row < aotk__kernel_count; row++) {
      sm80_rows += aotk__kernel_table[row].family == families[f].id && aotk__kernel_table[row].arch == 80;
    }
    int rows = 0;
    for (int row = 0; row < aotk__kernel_count; row++) rows += aotk__kernel_table[row].family == families[f].id;
    printf("    %s: %d of %d cubins and %d of %d PTX entries take its %zu parameters + %d hidden\n", families[f].name,
           cubin_entries_matching[f], rows, ptx_entries_matching[f], sm80_rows, strlen(families[f].param_kinds),
           HIDDEN_PARAMS);
    CHECK_MSG(cubin_entries_matching[f] == rows, "%s: %d of %d cubins match", families[f].name,
              cubin_entries_matching[f], rows);
    CHECK_MSG(ptx_entries_matching[f] == sm80_rows, "%s: %d of %d PTX entries match", families[f].name,
              ptx_entries_matching[f], sm80_rows);
  }
}

/* ---- damaged images ------------------------------------------------------------------------- */

/* A private copy of a row's compressed image, with `extra` spare bytes after it. */
static unsigned char *copy_image(const aotk__image *image, size_t extra, aotk__image *copy) {
  unsigned char *bytes = malloc(image->compressed_bytes + extra);
  if (bytes != NULL) {
    memcpy(bytes, image->data, image->compressed_bytes);
    memset(bytes + image->compressed_bytes, 0x42, extra);
  }
  *copy = *image;
  copy->data = bytes;
  return bytes;
}

/* Decompresses `image` expecting `expected`; checks the out-pointer is NULL and the message names
 * the image. Frees whatever comes back. */
static void check_decompress_fails(const aotk__image *image, aotk_status expected, const char *label) {
  unsigned char *raw = (unsigned char *)1;
  aotk_status status = aotk__image_decompress(image, label, &raw);
  CHECK_MSG(status == expected, "%s: %s, expected %s", label, aotk_status_name(status), aotk_status_name(expected));
  CHECK_MSG(raw == NULL, "%s: the out-pointer was not cleared on failure", label);
  if (status != AOTK_OK) {
    CHECK_MSG(message_mentions(label), "%s: the message \"%s\" does not name the image", label, aotk_last_error());
  } else {
    free(raw);
  }
}

/* One cubin and one PTX, so both kinds of image are covered. */
static const aotk__image *corruption_subjects(int which) {
  if (which == 0) return &aotk__kernel_table[0].cubin;
  for (int row = 0; row < aotk__kernel_count; row++) {
    if (aotk__kernel_table[row].ptx.raw_bytes > 0) return &aotk__kernel_table[row].ptx;
  }
  return NULL;
}

static void test_corrupt_images_rejected(void) {
  for (int which = 0; which < 2; which++) {
    const aotk__image *original = corruption_subjects(which);
    if (original == NULL) continue;
    aotk__image copy;
    unsigned char *bytes = copy_image(original, 0, &copy);
    CHECK(bytes != NULL);
    if (bytes == NULL) return;

    /* An intact copy decodes: the failures below are due to the damage alone. */
    unsigned char *raw = NULL;
    CHECK(aotk__image_decompress(&copy, "intact copy", &raw) == AOTK_OK);
    free(raw);

    bytes[copy.compressed_bytes / 2] ^= 0x5a;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "one byte flipped in the middle");
    bytes[copy.compressed_bytes / 2] ^= 0x5a;

    copy.hash = original->hash ^ 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "intact bytes, wrong hash");
    copy.hash = original->hash;

    copy.compressed_bytes = original->compressed_bytes - 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "compressed size one byte short");
    copy.compressed_bytes = original->compressed_bytes / 2;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "compressed size halved");
    copy.compressed_bytes = original->compressed_bytes;

    copy.raw_bytes = original->raw_bytes - 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "raw size one byte short");
    copy.raw_bytes = original->raw_bytes + 1;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "raw size one byte long");
    copy.raw_bytes = original->raw_bytes;

    copy.raw_bytes = 0;
    check_decompress_fails(&copy, AOTK_ERROR_KERNEL_NOT_BUILT, "raw_bytes 0");
    copy.raw_bytes = original->raw_bytes;
    copy.data = NULL;
    check_decompress_fails(&copy, AOTK_ERROR_KERNEL_NOT_BUILT, "data NULL");
    free(bytes);

    /* Bytes after the stream: the size recorded in the table no longer matches what was decoded. */
    bytes = copy_image(original, 8, &copy);
    CHECK(bytes != NULL);
    if (bytes == NULL) return;
    copy.compressed_bytes = original->compressed_bytes + 8;
    check_decompress_fails(&copy, AOTK_ERROR_IMAGE_CORRUPT, "trailing garbage after the stream");
    free(bytes);
  }
}

int main(void) {
  RUN_TEST(test_hash_function_known_values);
  RUN_TEST(test_every_image_decompresses_and_matches_its_row);
  RUN_TEST(test_corrupt_images_rejected);
  return aotk_test_finish();
}
