/**
 * A NetBox REST API server fixture for the NetBox client's tests (clients/netbox/): node:http only,
 * answering the calls the client makes with NetBox's own response shapes, status codes and error
 * bodies, for NetBox 4.2, 4.3, 4.5 and 4.6 (each the latest patch release of that line).
 *
 * Where each shape comes from (repository netbox-community/netbox unless said otherwise):
 *  - List envelope, offset and cursor pagination: netbox/netbox/api/pagination.py, NetBoxPagination
 *    (4.6; PR #21594 closing issue #21363) and OptionalLimitOffsetPagination (<= 4.5), on DRF's
 *    LimitOffsetPagination (rest_framework/pagination.py, rest_framework/utils/urls.py):
 *      {count, next, previous, results}; next/previous are request.build_absolute_uri() with limit/offset
 *      replaced, so absolute, from the Host header (or X-Forwarded-Host/-Proto: settings.py sets
 *      USE_X_FORWARDED_HOST and SECURE_PROXY_SSL_HEADER), query keys re-sorted and re-encoded the way
 *      Python's urlencode does (a '/' in address=10.1.2.3/24 comes back as %2F).
 *      PAGINATE_COUNT defaults to 50 and MAX_PAGE_SIZE to 1000 (docs/configuration/system.md);
 *      limit=0 means MAX_PAGE_SIZE (all only when MAX_PAGE_SIZE is 0), a limit above it is capped,
 *      a negative or non-numeric limit means the default; a bad or negative offset means 0.
 *    4.6 cursor mode, ?start=<pk>&limit=N: results have pk >= start ordered by pk, count is null,
 *      previous is always null, next is the same URL with start=<last pk + 1> (offset removed) when the
 *      page is full, else null; so a result set that is a multiple of limit ends with an empty page.
 *      start with offset (present at all, even offset=0) is 400 ["'start' and 'offset' are mutually
 *      exclusive."]; start with ordering is 400 ["Ordering cannot be specified in conjunction with
 *      cursor-based pagination."]; a non-integer or negative start is 400 ["Invalid 'start' parameter:
 *      must be a non-negative integer."] (DRF renders a plain ValidationError as a JSON list).
 *      Before 4.6 start is an unknown parameter, ignored.
 *  - API-Version header: netbox/netbox/middleware.py APIVersionMiddleware, settings.REST_FRAMEWORK_VERSION
 *    = major.minor ('4.6'), on every /api/ response. X-Request-ID (a UUID) on every response
 *    (netbox/netbox/tests/test_api.py test_http_headers). ETag (4.6, detail views only): the quoted
 *    ISO 8601 last_updated (PR #21522, issue #21356).
 *  - Authentication: netbox/netbox/api/authentication.py. REST_FRAMEWORK lists SessionAuthentication
 *    first, which sends no WWW-Authenticate, so DRF turns every 401 into 403; all failures are 403
 *    {"detail": ...}:
 *      no credentials (LOGIN_REQUIRED)      "Authentication credentials were not provided."
 *      4.5+  Token <unknown 40 chars>        "Invalid v1 token"
 *            Bearer nbt_<key>.<bad token>    "Invalid v2 token"
 *            Bearer nbt_<no dot>             "Invalid authorization header: Could not parse key from v2
 *                                            token. Did you mean to use 'Token' instead of 'Bearer'?"
 *            more than two words             'Invalid authorization header: Must be in the form "Bearer
 *                                            <key>.<token>" or "Token <token>"'
 *            expired / disabled              "Token expired" / "Token disabled"
 *            (the token's version is told by the nbt_ prefix, not by the keyword: Token nbt_... is v2)
 *      4.2/4.3 (DRF TokenAuthentication, keyword Token only): unknown "Invalid token", expired "Token
 *            expired", "Token" alone "Invalid token header. No credentials provided.", three words
 *            "Invalid token header. Token string should not contain spaces."; any other scheme, Bearer
 *            nbt_... included, is not looked at: the request is anonymous ("...not provided.").
 *    Tests: netbox/netbox/tests/test_authentication.py. Tokens: netbox/users/models/tokens.py and
 *    users/constants.py (v1: 40 characters; v2: nbt_ + 12-character key + '.' + 40-character token).
 *  - Errors: unknown pk 404 {"detail": "No Device matches the given query."} (Django get_object_or_404
 *    through DRF >= 3.15, which keeps the message); a non-numeric pk 404 {"detail": "Not found."};
 *    methods other than GET/HEAD 405 {"detail": "Method \"POST\" not allowed."} (after authentication,
 *    as in DRF); an Accept header asking another version=... 406 {"detail": "Invalid version in
 *    \"Accept\" header."}; a path NetBox has no route for 404 with Django's HTML page; a missing
 *    trailing slash 301 (APPEND_SLASH). A 500 is the JSON of utilities/error_handlers.py
 *    handle_rest_api_exception: {error, exception, netbox_version, python_version}.
 *  - Filters: django-filter through DjangoFilterBackend; unknown query parameters are ignored (issue
 *    #19579: "This is intended behavior. Invalid filters are ignored."), a bad value of a known filter
 *    is 400 {"<filter>": ["..."]}: netbox/dcim/filtersets.py, netbox/ipam/filtersets.py.
 *      ip-addresses ?address=: filter_address -> address__net_in: with /len an exact inet match
 *        (10.1.2.3/32 does not find 10.1.2.3/24), without it a match on HOST(address).
 *      interfaces ?device_id= is a MultiValueNumberFilter with a method: an unknown device gives an
 *        empty list, "abc" gives ["Enter a number."]; inventory-items and modules ?device_id= are
 *        ModelMultipleChoiceFilters: an unknown device is 400 ["Select a valid choice. 99 is not one of
 *        the available choices."] (as pynetbox issue #614 shows). modules have no ?device= (name)
 *        filter (issue #10023): it is ignored and every module comes back.
 *  - Shapes: netbox/dcim/api/serializers_/devices.py (Device, Module, MACAddress), device_components.py
 *    (Interface, InventoryItem, ModuleBay), devicetypes.py (ModuleType, ModuleTypeProfile),
 *    nested.py (NestedModuleBaySerializer), manufacturers.py, roles.py, sites.py;
 *    netbox/ipam/api/serializers_/ip.py (IPAddress); netbox/netbox/api/serializers/base.py (a nested
 *    serializer renders Meta.brief_fields, in Meta.fields order); netbox/netbox/api/gfk_fields.py
 *    (assigned_object is the nested Interface); netbox/netbox/api/views.py StatusView. Release notes
 *    docs/release-notes/version-4.{3,4,5,6}.md for what changed when:
 *      4.2: MAC addresses are objects: Interface has mac_address (the primary's, read-only) plus
 *           primary_mac_address and mac_addresses (nested {id,url,display,mac_address,description}).
 *           MACs render as NetBox stores them, upper case with colons.
 *      4.3: ModuleTypeProfile; ModuleType has profile (nested {id,url,display,name,description}) and
 *           attributes (the raw attribute_data, keyed by the schema's property names); the nested
 *           ModuleType inside a Module is {id,url,display,profile,manufacturer,model,description};
 *           /api/status/ gains netbox-full-version; DeviceRole is hierarchical (_depth).
 *      4.4: /api/status/ gains hostname and reports installed_apps (was installed-apps).
 *      4.5: owner on most objects; v2 tokens; module_count (nested ModuleType too) and device_count
 *           (nested DeviceType) become cached counters; Interface bridge_interfaces.
 *      4.6: cursor pagination; ETag; oob_ip/primary_ip nested IPs add dns_name, nat_inside, nat_outside;
 *           ModuleType adds its template counters (4.6.2, PR #22302).
 *    Module type profiles shipped by migration dcim/0205_load_module_type_profiles (ids in load order
 *    CPU 1, Fan 2, GPU 3, Hard disk 4, Memory 5, Power supply 6; Expansion card added in 4.3.4
 *    (#19571), Transceiver later): "Hard disk" {size (integer, "Size (GB)", required), type ("HD" |
 *    "SSD" | "NVME", "Disk type"), speed (integer, "Speed (RPM)")}; "GPU" {gpu, interface ("PCIe 4.0"
 *    | "PCIe 4.0 x8" | "PCIe 4.0 x16" | "PCIe 5.0 x16"), memory (integer, "Memory (GB)", required)};
 *    "Memory" {class (DDR3/DDR4/DDR5, required), size (required), data_rate, ecc}; "CPU" {architecture,
 *    speed, cores} (the CPU schema is from the feature issue #19002, not read from the shipped file).
 *  - Object ordering without start: each model's Meta.ordering (devices by name, interfaces by device
 *    then natural name, inventory items by device id then name, modules by bay, IPs by address), so an
 *    offset page is not in id order; with start it is pk order.
 *
 *  - IPAM prefixes and allocation (IPv4 only; addPrefix refuses IPv6):
 *      Prefix shape: netbox/ipam/api/serializers_/ip.py PrefixSerializer. 4.2 replaced site with
 *        scope_type/scope_id/scope (release notes 4.2); 4.5 adds owner after description (the 4.5
 *        PrimaryModelSerializer version of ip.py); nothing else changed for Prefix through 4.6 (REST API
 *        changes in version-4.3/4.5/4.6.md). brief_fields (id, url, display, family, prefix, description,
 *        _depth). children/_depth are the cached counts of contained / containing prefixes (same VRF).
 *        Meta.ordering (vrf nulls first, prefix, pk): netbox/ipam/models/ip.py. Prefix.save() clears host
 *        bits. custom_fields renders every custom field defined for ipam.prefix, null when unset, in
 *        CustomField order (group_name, weight, name): the fixture defines one per name ever given to
 *        addPrefix. Filters (netbox/ipam/filtersets.py PrefixFilterSet): id, prefix (filter_prefix:
 *        netaddr.IPNetwork(v), no .cidr, so 10.40.0.5/24 matches nothing), q (search: description
 *        icontains, text(prefix) contains, or net_contains_or_equals), status, is_pool, mark_utilized,
 *        description (+ lookups), contains, within, within_include, mask_length.
 *      IPAddress: assigned_object_type/_id/assigned_object are null when unassigned (the GFK through
 *        netbox/netbox/api/gfk_fields.py); status, role, dns_name, description, comments come from the
 *        row. Filters (IPAddressFilterSet): parent (search_by_parent: each value netaddr.IPNetwork(v.strip())
 *        .cidr, address__net_host_contained; one unparseable value empties the result), dns_name and
 *        description (Meta.fields, so exact plus NetBox's generated lookups __n __ic __nic __ie __nie __isw
 *        __nisw __iew __niew __empty __regex __iregex: netbox/netbox/filtersets.py), status, role,
 *        assigned, q (dns_name/description icontains, address istartswith).
 *      /api/ipam/prefixes/<int:pk>/available-ips/ (netbox/ipam/api/urls.py; a non-numeric pk is no route):
 *        netbox/ipam/api/views.py AvailableObjectsView / AvailableIPAddressesView (PR #12935, since 3.6,
 *        so every line simulated here). get_available_ips() (netbox/ipam/models/ip.py): the prefix's
 *        IPSet minus the hosts of IP addresses net_host_contained in it (any mask), minus (IPv4, not a
 *        pool, shorter than /31) the network and broadcast addresses; ascending. IP ranges are not
 *        simulated (mark_populated ones would be taken too).
 *        GET: [{family: 4, address: 'a.b.c.d/<prefix len>', vrf: null}] (AvailableIPSerializer), not
 *          paginated; get_results_limit(): int(limit) (default PAGINATE_COUNT, a non-integer means that
 *          too) or MAX_PAGE_SIZE, capped at MAX_PAGE_SIZE; a negative limit lists everything.
 *        POST: body an object or a list of them (DRF JSONParser; no Content-Type or an empty body is {};
 *          another type 415; bad JSON 400 "JSON parse error - " and CPython's json message). In order:
 *          token write permission (403), the prefix (404 "No Prefix matches the given query."), the write
 *          serializer with many=True (400, a positional list: [{}, {...}]),
 *          then with fewer free addresses than objects asked 409 {"detail": "Insufficient resources are
 *          available to satisfy the request"} (the same text and status on 4.2, 4.3, 4.5 and 4.6; 3.1.1
 *          moved 204 to 409, pynetbox issue #422; older lines answered 400 then 204 "An insufficient number
 *          of IP addresses are available within the prefix ..."), then address = '<free ip>/<len>' and
 *          vrf = the prefix's, then IPAddressSerializer (400: a dict for an object, a positional list for
 *          a list), then 201 with the created object or list. Unknown fields are ignored.
 *          Write serializer: 4.2/4.3 AvailableIPSerializer (only description is writable: a string, not
 *          blank); 4.5/4.6 AvailableIPRequestSerializer (4.5.1, issue #21144): an optional prefix_length
 *          (an integer, at least the prefix's length, at most 32; its errors are plain strings, and the
 *          over-32 one says "IPv6", as the source does), used as the address's length.
 *          IPAddressSerializer: status/role are NetBox ChoiceFields (netbox/netbox/api/fields.py: "x is not
 *          a valid choice.", null means blank), dns_name (DNSValidator, ipam/validators.py; 255), description
 *          (200), comments, tenant/owner/tags (nothing of those exists here: NetBox's "Related object not
 *          found ..." from utilities/api.py get_related_object_by_attrs), assigned_object_type/_id
 *          (dcim.interface, virtualization.vminterface, ipam.fhrpgroup; an id of no object is stored and
 *          renders assigned_object null), custom_fields (a dict; no custom field exists for ipam.ipaddress:
 *          4.5.8+ refuses unknown names, PR #21861 / issue #21529, {"custom_fields": {"x": "Custom field
 *          'x' does not exist for this object type."}}, 4.2/4.3 accept and drop them). IPAddress.clean():
 *          network ID / broadcast assigned to an interface, SLAAC on IPv4. save() lowercases dns_name.
 *          nat_inside is not simulated (anything but null is a 400 saying so).
 *      DELETE /api/ipam/ip-addresses/{id}/: 204 without a body (a device's oob_ip is SET_NULL), unknown id
 *        404 "No IPAddress matches the given query.".
 *  - Write permission: netbox/netbox/api/authentication.py TokenPermissions: DRF's initial() checks
 *    permissions before the method's handler, so an unsafe method with a read-only token (write_enabled
 *    False) is 403 "You do not have permission to perform this action." and an anonymous one 403
 *    "Authentication credentials were not provided." (authenticated_users_only) on every endpoint,
 *    405 ones included; a write token then gets the 405 where the fixture has no write.
 *
 * Assumed: LOGIN_REQUIRED=False also grants anonymous reads (EXEMPT_VIEW_PERMISSIONS = ['*']).
 * Not simulated: writes other than available-ips POST and ip-address DELETE, brief/fields/omit beyond
 * top-level keys, object permissions, virtual chassis peers, VRFs, IPv6 allocation, IP ranges.
 */
import http from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';

export type NetboxVersion = '4.2' | '4.3' | '4.5' | '4.6';

export interface NetboxInterfaceFixture {
  name: string;
  /** e.g. '25gbase-x-sfp28', '1000base-t' (default '1000base-t') */
  type?: string;
  mac?: string | null;
  mgmtOnly?: boolean;
  enabled?: boolean;
  speedKbps?: number | null;
  label?: string;
  description?: string;
}

export interface NetboxInventoryItemFixture {
  name: string;
  /** role name, e.g. 'Disk', 'GPU' */
  role?: string | null;
  manufacturer?: string | null;
  partId?: string;
  serial?: string;
  label?: string;
  description?: string;
  assetTag?: string | null;
}

export interface NetboxModuleFixture {
  bay: string;
  model: string;
  manufacturer: string;
  /** 4.3+ profile name, e.g. 'Hard disk', 'GPU' (the shipped ones carry their schemas) */
  profile?: string | null;
  attributes?: Record<string, unknown> | null;
  serial?: string;
  description?: string;
  status?: string;
}

export interface NetboxDeviceFixture {
  id?: number;
  name: string;
  serial?: string;
  /** 'a.b.c.d/len' as NetBox stores it */
  bmcIp: string;
  /** default 'bmc' */
  bmcInterface?: string;
  interfaces?: NetboxInterfaceFixture[];
  inventoryItems?: NetboxInventoryItemFixture[];
  modules?: NetboxModuleFixture[];
}

export interface NetboxPrefixFixture {
  /** 'a.b.c.d/len' (IPv4); host bits are cleared, as Prefix.save() does */
  prefix: string;
  id?: number;
  /** is_pool: every address is usable (network and broadcast included); default false */
  isPool?: boolean;
  markUtilized?: boolean;
  /** 'container' | 'active' | 'reserved' | 'deprecated' (default 'active') */
  status?: string;
  description?: string;
  /** e.g. { gateway: '10.40.0.1' }; each name becomes a custom field of ipam.prefix (null on the others) */
  customFields?: Record<string, unknown>;
}

export interface NetboxIpAddressFixture {
  /** 'a.b.c.d/len' as NetBox stores it (IPv4), not assigned to anything */
  address: string;
  id?: number;
  /** 'active' | 'reserved' | 'deprecated' | 'dhcp' | 'slaac' (default 'active') */
  status?: string;
  role?: string | null;
  /** lowercased, as IPAddress.save() does */
  dnsName?: string;
  description?: string;
}

export interface NetboxFaults {
  /** Delay answers whose path+query matches (substring or RegExp) by ms (a slow page). */
  slow?: { match: string | RegExp; delayMs: number }[];
  /** The next N requests (or those matching) answer 500 with NetBox's error page/body. */
  fail500?: { count: number; match?: string | RegExp };
  /** Requests are accepted and never answered. */
  hang?: boolean;
}

export interface NetboxSim {
  /** http://127.0.0.1:<port> (no trailing slash) */
  url: string;
  /** a valid 40-hex v1 token */
  v1Token: string;
  /** a valid 'nbt_<key>.<token>' v2 token (only accepted when version >= 4.5) */
  v2Token: string;
  /** path includes the query string; body is the request body as text (null when there was none) */
  requests: { method: string; path: string; authorization: string | null; at: number; body: string | null }[];
  setFaults(f: NetboxFaults): void;
  /** returns its id */
  addDevice(d: NetboxDeviceFixture): number;
  /** closes every socket (hung ones too); nothing left listening */
  stop(): Promise<void>;
  // Beyond the contract (additive):
  /** The simulated NetBox line. */
  version: NetboxVersion;
  /** A v1 token that exists but has expired ("Token expired"). */
  expiredV1Token: string;
  /** A v2 token that exists but has expired ("Token expired"; 4.5+, anonymous before). */
  expiredV2Token: string;
  /** A valid v1 token with write_enabled False: reads pass, POST/DELETE are 403. */
  readOnlyToken: string;
  /** The same as a v2 token (4.5+, anonymous before). */
  readOnlyV2Token: string;
  /** An IPAM prefix (GET ipam/prefixes/, POST its available-ips/); returns its id. */
  addPrefix(p: NetboxPrefixFixture): { id: number };
  /** An IP address assigned to nothing (it takes its host out of any prefix holding it); returns its id. */
  addIpAddress(ip: NetboxIpAddressFixture): { id: number };
}

export interface NetboxSimOptions {
  /** default '4.6' */
  version?: NetboxVersion;
  /** PAGINATE_COUNT, default 50 */
  pageSize?: number;
  /** MAX_PAGE_SIZE, default 1000 (0: limit=0 returns everything) */
  maxPageSize?: number;
  devices?: NetboxDeviceFixture[];
  prefixes?: NetboxPrefixFixture[];
  /** LOGIN_REQUIRED, default true */
  loginRequired?: boolean;
}

// ---------------------------------------------------------------------------------------------
// Versions and constants

const RANK: Record<NetboxVersion, number> = { '4.2': 42, '4.3': 43, '4.5': 45, '4.6': 46 };
const since = (v: NetboxVersion, min: NetboxVersion) => RANK[v] >= RANK[min];

/** The patch release each line stands for, and what /api/status/ says about the stack under it. */
const RELEASE: Record<NetboxVersion, { full: string; django: string; python: string; apps: Record<string, string> }> = {
  '4.2': {
    full: '4.2.9', django: '5.1.8', python: '3.12.3',
    apps: { django_filters: '24.3', django_prometheus: '2.3.1', django_rq: '3.0.0', django_tables2: '2.7.5', drf_spectacular: '0.28.0', drf_spectacular_sidecar: '2025.3.1', mptt: '0.16.0', rest_framework: '3.15.2', social_django: '5.4.3', taggit: '6.1.0', timezone_field: '7.1' },
  },
  '4.3': {
    full: '4.3.7', django: '5.2.5', python: '3.12.3',
    apps: { django_filters: '25.1', django_prometheus: '2.3.1', django_rq: '3.0.1', django_tables2: '2.7.5', drf_spectacular: '0.28.0', drf_spectacular_sidecar: '2025.5.1', mptt: '0.17.0', rest_framework: '3.16.0', social_django: '5.4.3', taggit: '6.1.0', timezone_field: '7.1' },
  },
  '4.5': {
    full: '4.5.10', django: '5.2.10', python: '3.12.3',
    apps: { django_filters: '25.2', django_prometheus: '2.4.1', django_rq: '3.1', django_tables2: '2.7.5', drf_spectacular: '0.29.0', drf_spectacular_sidecar: '2025.12.1', mptt: '0.18.0', rest_framework: '3.16.1', social_django: '5.6.0', taggit: '6.1.0', timezone_field: '7.1' },
  },
  '4.6': {
    full: '4.6.9', django: '6.0.6', python: '3.12.3',
    apps: { django_filters: '25.2', django_prometheus: '2.4.1', django_rq: '3.2.1', django_tables2: '2.8.0', drf_spectacular: '0.29.0', drf_spectacular_sidecar: '2026.4.1', mptt: '0.18.0', rest_framework: '3.16.1', social_django: '5.7.0', taggit: '6.1.0', timezone_field: '7.2' },
  },
};

/** dcim/choices.py InterfaceTypeChoices (the ones a server has; others render their value as label). */
const INTERFACE_TYPES: Record<string, string> = {
  virtual: 'Virtual', bridge: 'Bridge', lag: 'Link Aggregation Group (LAG)',
  '100base-tx': '100BASE-TX (10/100ME)', '1000base-t': '1000BASE-T (1GE)', '2.5gbase-t': '2.5GBASE-T (2.5GE)',
  '5gbase-t': '5GBASE-T (5GE)', '10gbase-t': '10GBASE-T (10GE)', '1000base-x-sfp': 'SFP (1GE)',
  '10gbase-x-sfpp': 'SFP+ (10GE)', '25gbase-x-sfp28': 'SFP28 (25GE)', '50gbase-x-sfp56': 'SFP56 (50GE)',
  '40gbase-x-qsfpp': 'QSFP+ (40GE)', '50gbase-x-sfp28': 'QSFP28 (50GE)', '100gbase-x-qsfp28': 'QSFP28 (100GE)',
  '100gbase-x-qsfpdd': 'QSFP-DD (100GE)', '200gbase-x-qsfp56': 'QSFP56 (200GE)', '200gbase-x-qsfpdd': 'QSFP-DD (200GE)',
  '400gbase-x-qsfpdd': 'QSFP-DD (400GE)', '400gbase-x-osfp': 'OSFP (400GE)', '400gbase-x-qsfp112': 'QSFP112 (400GE)',
  '800gbase-x-qsfpdd': 'QSFP-DD (800GE)', '800gbase-x-osfp': 'OSFP (800GE)',
  'infiniband-hdr': 'HDR (200 Gbps)', 'infiniband-ndr': 'NDR (400 Gbps)', other: 'Other',
};
/** netbox/ipam/choices.py */
const PREFIX_STATUS: Record<string, string> = { container: 'Container', active: 'Active', reserved: 'Reserved', deprecated: 'Deprecated' };
const IP_STATUS: Record<string, string> = { active: 'Active', reserved: 'Reserved', deprecated: 'Deprecated', dhcp: 'DHCP', slaac: 'SLAAC' };
const IP_ROLE: Record<string, string> = {
  loopback: 'Loopback', secondary: 'Secondary', anycast: 'Anycast', vip: 'VIP', vrrp: 'VRRP', hsrp: 'HSRP', glbp: 'GLBP', carp: 'CARP',
};
/** ipam/constants.py IPADDRESS_ASSIGNMENT_MODELS */
const IP_ASSIGNMENT_TYPES = ['dcim.interface', 'virtualization.vminterface', 'ipam.fhrpgroup'];
/** DeviceStatusChoices / ModuleStatusChoices / InventoryItemStatusChoices share these. */
const STATUS_LABELS: Record<string, string> = {
  offline: 'Offline', active: 'Active', planned: 'Planned', staged: 'Staged', failed: 'Failed',
  inventory: 'Inventory', decommissioning: 'Decommissioning',
};

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

interface ProfileSchema { properties: Record<string, { type: string; title?: string; description?: string; enum?: (string | number)[]; default?: Json }>; required?: string[] }

/** The profiles NetBox ships (dcim/migrations/initial_data/module_type_profiles/*.json), in load order. */
function shippedProfiles(v: NetboxVersion): { name: string; schema: ProfileSchema }[] {
  const list: { name: string; schema: ProfileSchema }[] = [
    { name: 'CPU', schema: { properties: { architecture: { type: 'string', title: 'Architecture' }, speed: { type: 'number', title: 'Speed', description: 'Clock speed in GHz' }, cores: { type: 'integer', description: 'Number of cores present' } } } },
    { name: 'Fan', schema: { properties: { rpm: { type: 'integer', title: 'RPM', description: 'Fan speed (RPM)' } } } },
    { name: 'GPU', schema: { properties: { interface: { type: 'string', enum: ['PCIe 4.0', 'PCIe 4.0 x8', 'PCIe 4.0 x16', 'PCIe 5.0 x16'] }, gpu: { type: 'string', title: 'GPU' }, memory: { type: 'integer', title: 'Memory (GB)', description: 'Total memory capacity (in GB)' } }, required: ['memory'] } },
    { name: 'Hard disk', schema: { properties: { type: { type: 'string', title: 'Disk type', enum: ['HD', 'SSD', 'NVME'], default: 'HD' }, size: { type: 'integer', title: 'Size (GB)', description: 'Raw disk capacity' }, speed: { type: 'integer', title: 'Speed (RPM)' } }, required: ['size'] } },
    { name: 'Memory', schema: { properties: { class: { type: 'string', title: 'Memory class', enum: ['DDR3', 'DDR4', 'DDR5'], default: 'DDR5' }, size: { type: 'integer', title: 'Size (GB)', description: 'Raw capacity of the module' }, data_rate: { type: 'integer', title: 'Data rate', description: 'Speed in MT/s' }, ecc: { type: 'boolean', title: 'ECC', description: 'Error-correcting code is enabled' } }, required: ['class', 'size'] } },
    { name: 'Power supply', schema: { properties: { input_current: { type: 'string', title: 'Current type', enum: ['AC', 'DC'], default: 'AC' }, input_voltage: { type: 'integer', title: 'Voltage', default: 120 }, wattage: { type: 'integer', description: 'Available output power (watts)' }, hot_swappable: { type: 'boolean', title: 'Hot-swappable', default: false } }, required: ['input_current', 'input_voltage'] } },
    { name: 'Expansion card', schema: { properties: { 'Connector type': { type: 'string', description: 'Connector type e.g. PCIe x4' }, bandwidth: { type: 'integer', description: 'Total Bandwidth for this module' } } } },
  ];
  if (since(v, '4.6')) {
    list.push({ name: 'Transceiver', schema: { properties: {
      form_factor: { type: 'string', title: 'Form factor', description: 'Physical form factor e.g. SFP+, QSFP28, OSFP' },
      media: { type: 'string', title: 'Media', description: 'Physical media e.g. single-mode fiber, multimode fiber, DAC' },
      phy: { type: 'string', title: 'PHY', description: 'Physical layer standard e.g. 10GBASE-LR, 400ZR' },
      data_rate: { type: 'string', title: 'Data rate', description: 'Nominal line rate e.g. 10G, 400G' },
      reach: { type: 'number', title: 'Maximum reach (m)', description: 'Maximum supported cable or fiber run, in meters' },
      connector_type: { type: 'string', title: 'Connector type', description: 'Connector type e.g. LC/UPC, MPO-12, 8P8C' },
    } } });
  }
  return list;
}

// ---------------------------------------------------------------------------------------------
// Records

interface Base { id: number; created: string; updated: string }
interface Manufacturer extends Base { name: string; slug: string }
interface Site extends Base { name: string; slug: string }
interface DeviceRole extends Base { name: string; slug: string; color: string }
interface DeviceType extends Base { manufacturer: Manufacturer; model: string; slug: string }
interface Device extends Base { name: string; serial: string; type: DeviceType; role: DeviceRole; site: Site; oob: IpAddress | null }
interface Iface extends Base { device: Device; name: string; label: string; type: string; enabled: boolean; mgmtOnly: boolean; speed: number | null; description: string; macs: Mac[]; primary: Mac | null }
interface Mac extends Base { mac: string; iface: Iface }
interface IpAddress extends Base {
  address: string;
  /** the interface assigned_object resolves to (null: unassigned, another type, or an id of nothing) */
  iface: Iface | null;
  assignedType: string | null;
  assignedId: number | null;
  status: string;
  role: string | null;
  dnsName: string;
  description: string;
  comments: string;
}
interface Prefix extends Base {
  /** canonical 'a.b.c.d/len' with the host bits cleared */
  prefix: string;
  net: number;
  len: number;
  isPool: boolean;
  markUtilized: boolean;
  status: string;
  description: string;
  customFields: Record<string, Json>;
}
interface ItemRole extends Base { name: string; slug: string; color: string }
interface Item extends Base { device: Device; name: string; label: string; role: ItemRole | null; manufacturer: Manufacturer | null; partId: string; serial: string; assetTag: string | null; description: string }
interface Profile extends Base { name: string; schema: ProfileSchema | null }
interface ModuleType extends Base { manufacturer: Manufacturer; model: string; profile: Profile | null; attributes: Record<string, unknown> | null }
interface Bay extends Base { device: Device; name: string; module: Module | null }
interface Module extends Base { device: Device; bay: Bay; type: ModuleType; status: string; serial: string; description: string }

class FilterError extends Error {
  constructor(readonly messages: string[]) { super(messages.join(' ')); }
}

interface Ctx { base: string; v: NetboxVersion; store: Store; query: URLSearchParams }
type Filter<T> = (values: string[], rows: T[], store: Store) => T[];

interface Spec<T extends Base> {
  objectName: string;
  api: string;
  ui: string;
  since?: NetboxVersion;
  full(o: T, c: Ctx): Obj;
  brief(o: T, c: Ctx): Obj;
  order(a: T, b: T): number;
  filters: Record<string, Filter<T>>;
  search?(o: T): string[];
}

class Table<T extends Base> {
  readonly rows = new Map<number, T>();
  private next = 1;
  constructor(readonly spec: Spec<T>, private readonly stamp: () => { created: string; updated: string }) {}
  insert(make: (b: Base) => T, id?: number): T {
    const pk = id ?? this.next;
    if (this.rows.has(pk)) throw new Error(`${this.spec.objectName} ${pk} exists`);
    this.next = Math.max(this.next, pk + 1);
    const o = make({ id: pk, ...this.stamp() });
    this.rows.set(pk, o);
    return o;
  }
  all(): T[] { return [...this.rows.values()].sort((a, b) => a.id - b.id); }
}

// ---------------------------------------------------------------------------------------------
// Ordering helpers (Meta.ordering; names use the natural_sort collation)

const natural = new Intl.Collator('und', { numeric: true }).compare;
const byId = (a: Base, b: Base) => a.id - b.id;
const deviceOrder = (a: Device, b: Device) => natural(a.name, b.name) || byId(a, b);

function v4(host: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return null;
  const o = m.slice(1).map(Number);
  if (o.some((x) => x > 255)) return null;
  return ((o[0]! << 24) >>> 0) + (o[1]! << 16) + (o[2]! << 8) + o[3]!;
}
/** HOST(address) as PostgreSQL prints it; null when the value is no address at all. */
function canonicalHost(host: string): string | null {
  const n = v4(host);
  if (n !== null) return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
  if (!host.includes(':')) return null;
  try { return new URL(`http://[${host}]/`).hostname.slice(1, -1); } catch { return null; }
}
function splitInet(a: string): { host: string; len: number } {
  const [h, l] = a.split('/');
  const host = canonicalHost(h ?? '') ?? (h ?? '');
  return { host, len: l === undefined ? (host.includes(':') ? 128 : 32) : Number(l) };
}
/** PostgreSQL inet ordering: family, network bits common to both masks, mask length, then the rest. */
function inetOrder(a: string, b: string): number {
  const x = splitInet(a); const y = splitInet(b);
  const xn = v4(x.host); const yn = v4(y.host);
  if (xn === null || yn === null) return (xn === null ? 1 : 0) - (yn === null ? 1 : 0) || (x.host < y.host ? -1 : x.host > y.host ? 1 : x.len - y.len);
  const common = Math.min(x.len, y.len);
  const mask = common === 0 ? 0 : (0xffffffff << (32 - common)) >>> 0;
  return ((xn & mask) >>> 0) - ((yn & mask) >>> 0) || x.len - y.len || xn - yn;
}

const ipStr = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
const maskOf = (len: number) => (len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0);
/** The first and last address of a network. */
function span(net: number, len: number): { first: number; last: number } {
  const first = (net & maskOf(len)) >>> 0;
  return { first, last: first + 2 ** (32 - len) - 1 };
}
/** The host (as a number) of a stored IPv4 'a.b.c.d/len', or null. */
function hostOf(address: string): number | null {
  return v4(address.split('/')[0] ?? '');
}
/**
 * netaddr.IPNetwork(value): 'a.b.c.d', 'a.b.c.d/len', 'a.b.c.d/netmask' or '/hostmask' (IPv4); an
 * IPv6 value parses too (this store holds no IPv6, so it matches nothing); anything else is null.
 */
function parseNetwork(value: string): { host: number; len: number } | 'v6' | null {
  const [h, l, more] = value.split('/');
  if (more !== undefined || h === undefined) return null;
  const host = v4(h);
  if (host === null) {
    if (!h.includes(':') || canonicalHost(h) === null) return null;
    return l === undefined || (/^\d{1,3}$/.test(l) && Number(l) <= 128) ? 'v6' : null;
  }
  if (l === undefined) return { host, len: 32 };
  if (/^\d{1,2}$/.test(l) && Number(l) <= 32) return { host, len: Number(l) };
  const m = v4(l);
  if (m === null) return null;
  for (let len = 0; len <= 32; len++) {
    if (m === maskOf(len)) return { host, len }; // netmask
    if (m === (~maskOf(len) >>> 0)) return { host, len }; // hostmask (ACL style)
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// Filters (django-filter field semantics)

const NUMBER = /^\s*[+-]?\d+\s*$/;
/** Python's int(): surrounding blanks, a sign and digit-group underscores are allowed. */
function pyInt(s: string | null): number | null {
  if (s === null || !/^\s*[+-]?\d+(_\d+)*\s*$/.test(s)) return null;
  return Number(s.trim().replace(/_/g, ''));
}

/** MultiValueNumberFilter on the object's own field. */
function numberFilter<T>(get: (o: T) => number | null): Filter<T> {
  return (values, rows) => {
    if (values.some((v) => !NUMBER.test(v))) throw new FilterError(['Enter a number.']);
    const want = new Set(values.map(Number));
    return rows.filter((o) => { const x = get(o); return x !== null && want.has(x); });
  };
}
/** ModelMultipleChoiceFilter by pk: an unknown pk is a 400. */
function choiceById<T>(all: () => Base[], get: (o: T) => number | null): Filter<T> {
  return (values, rows) => {
    const bad = values.find((v) => !NUMBER.test(v));
    if (bad !== undefined) throw new FilterError([`\u201c${bad}\u201d is not a valid value.`]);
    const known = new Set(all().map((o) => o.id));
    const missing = values.find((v) => !known.has(Number(v)));
    if (missing !== undefined) throw new FilterError([`Select a valid choice. ${missing} is not one of the available choices.`]);
    const want = new Set(values.map(Number));
    return rows.filter((o) => { const x = get(o); return x !== null && want.has(x); });
  };
}
/** ModelMultipleChoiceFilter with to_field_name (name or slug): an unknown value is a 400. */
function choiceByField<T, R>(all: () => R[], key: (r: R) => string, get: (o: T) => string | null): Filter<T> {
  return (values, rows) => {
    const known = new Set(all().map(key));
    const missing = values.find((v) => !known.has(v));
    if (missing !== undefined) throw new FilterError([`Select a valid choice. ${missing} is not one of the available choices.`]);
    return rows.filter((o) => { const x = get(o); return x !== null && values.includes(x); });
  };
}
/** MultiValueCharFilter (exact, or iexact). */
function charFilter<T>(get: (o: T) => string, iexact = false): Filter<T> {
  return (values, rows) => {
    const want = new Set(iexact ? values.map((v) => v.toLowerCase()) : values);
    return rows.filter((o) => want.has(iexact ? get(o).toLowerCase() : get(o)));
  };
}
/**
 * A model CharField in a filterset's Meta.fields: the exact MultiValueCharFilter plus the lookups
 * netbox/netbox/filtersets.py generates (FILTER_CHAR_BASED_LOOKUP_MAP; n* ones exclude; values OR'd).
 */
function charLookups<T>(name: string, get: (o: T) => string): Record<string, Filter<T>> {
  const lower = (x: string) => x.toLowerCase();
  const tests: Record<string, (field: string, want: string) => boolean> = {
    '': (f, w) => f === w,
    n: (f, w) => f === w,
    ic: (f, w) => lower(f).includes(lower(w)),
    nic: (f, w) => lower(f).includes(lower(w)),
    ie: (f, w) => lower(f) === lower(w),
    nie: (f, w) => lower(f) === lower(w),
    isw: (f, w) => lower(f).startsWith(lower(w)),
    nisw: (f, w) => lower(f).startsWith(lower(w)),
    iew: (f, w) => lower(f).endsWith(lower(w)),
    niew: (f, w) => lower(f).endsWith(lower(w)),
    regex: (f, w) => { try { return new RegExp(w).test(f); } catch { return false; } },
    iregex: (f, w) => { try { return new RegExp(w, 'i').test(f); } catch { return false; } },
  };
  const out: Record<string, Filter<T>> = {};
  for (const [lookup, test] of Object.entries(tests)) {
    const negate = lookup.startsWith('n') && lookup !== '';
    out[lookup ? `${name}__${lookup}` : name] = (values, rows) =>
      rows.filter((o) => values.some((w) => test(get(o), w)) !== negate);
  }
  // __empty is a BooleanFilter: true/false (a value it does not know applies no filter)
  out[`${name}__empty`] = boolFilter((o: T) => get(o) === '');
  return out;
}
/** BooleanFilter: a value NullBooleanField does not know applies no filter. */
function boolFilter<T>(get: (o: T) => boolean): Filter<T> {
  return (values, rows) => {
    const v = values.at(-1)!;
    const b = ['True', 'true', '1'].includes(v) ? true : ['False', 'false', '0'].includes(v) ? false : null;
    return b === null ? rows : rows.filter((o) => get(o) === b);
  };
}
/** MultipleChoiceFilter: a value not among the choices is a 400. */
function multipleChoice<T>(choices: Record<string, string>, get: (o: T) => string): Filter<T> {
  return (values, rows) => {
    const bad = values.find((v) => !(v in choices));
    if (bad !== undefined) throw new FilterError([`Select a valid choice. ${bad} is not one of the available choices.`]);
    return rows.filter((o) => values.includes(get(o)));
  };
}

// ---------------------------------------------------------------------------------------------
// The store and its serializers

function slugify(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9_ -]/g, '').trim().replace(/[\s-]+/g, '-');
}
function normalizeMac(mac: string): string {
  const hex = mac.replace(/[^0-9a-fA-F]/g, '');
  if (hex.length !== 12) throw new Error(`not a MAC address: ${mac}`);
  return hex.toUpperCase().match(/../g)!.join(':');
}
function choice(value: string, labels: Record<string, string>): Obj {
  return { value, label: labels[value] ?? value };
}
function common(o: Base, extra: Obj = {}): Obj {
  return { ...extra, tags: [], custom_fields: {}, created: o.created, last_updated: o.updated };
}

class Store {
  private seq = 0;
  readonly manufacturers: Table<Manufacturer>;
  readonly sites: Table<Site>;
  readonly deviceRoles: Table<DeviceRole>;
  readonly deviceTypes: Table<DeviceType>;
  readonly devices: Table<Device>;
  readonly interfaces: Table<Iface>;
  readonly macs: Table<Mac>;
  readonly ips: Table<IpAddress>;
  readonly prefixes: Table<Prefix>;
  /** The custom fields defined for ipam.prefix (every name addPrefix was given). */
  readonly prefixCustomFieldNames = new Set<string>();
  readonly itemRoles: Table<ItemRole>;
  readonly items: Table<Item>;
  readonly profiles: Table<Profile>;
  readonly moduleTypes: Table<ModuleType>;
  readonly bays: Table<Bay>;
  readonly modules: Table<Module>;
  readonly tables: Table<any>[];

  constructor(readonly v: NetboxVersion) {
    const stamp = () => this.stamp();
    const t = <T extends Base>(spec: Spec<T>) => new Table<T>(spec, stamp);
    const v45 = since(v, '4.5');
    const owner = (): Obj => (v45 ? { owner: null } : {});
    const ref = (c: Ctx, api: string, ui: string, o: Base, display: string): Obj => ({ id: o.id, url: `${c.base}/api/${api}/${o.id}/`, display_url: `${c.base}/${ui}/${o.id}/`, display });
    const briefRef = (c: Ctx, api: string, o: Base, display: string): Obj => ({ id: o.id, url: `${c.base}/api/${api}/${o.id}/`, display });

    const manufacturerBrief = (c: Ctx, m: Manufacturer): Obj => ({ ...briefRef(c, 'dcim/manufacturers', m, m.name), name: m.name, slug: m.slug, description: '' });
    this.manufacturers = t<Manufacturer>({
      objectName: 'Manufacturer', api: 'dcim/manufacturers', ui: 'dcim/manufacturers',
      brief: (o, c) => manufacturerBrief(c, o),
      full: (m, c) => common(m, {
        ...ref(c, 'dcim/manufacturers', 'dcim/manufacturers', m, m.name), name: m.name, slug: m.slug, description: '',
        ...owner(), ...(v45 ? { comments: '' } : {}),
      }),
      order: (a, b) => natural(a.name, b.name) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), name: charFilter((o) => o.name), slug: charFilter((o) => o.slug) },
    });
    const siteBrief = (c: Ctx, s: Site): Obj => ({ ...briefRef(c, 'dcim/sites', s, s.name), name: s.name, slug: s.slug, description: '' });
    this.sites = t<Site>({
      objectName: 'Site', api: 'dcim/sites', ui: 'dcim/sites',
      brief: (o, c) => siteBrief(c, o),
      full: (s, c) => common(s, {
        ...ref(c, 'dcim/sites', 'dcim/sites', s, s.name), name: s.name, slug: s.slug, status: choice('active', STATUS_LABELS),
        region: null, group: null, tenant: null, facility: '', time_zone: null, description: '', physical_address: '',
        shipping_address: '', latitude: null, longitude: null, ...owner(), comments: '', asns: [],
      }),
      order: (a, b) => natural(a.name, b.name) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), name: charFilter((o) => o.name), slug: charFilter((o) => o.slug) },
    });
    const roleBrief = (c: Ctx, r: DeviceRole): Obj => ({
      ...briefRef(c, 'dcim/device-roles', r, r.name), name: r.name, slug: r.slug, description: '',
      ...(since(v, '4.3') ? { device_count: 0, virtualmachine_count: 0, _depth: 0 } : {}),
    });
    this.deviceRoles = t<DeviceRole>({
      objectName: 'DeviceRole', api: 'dcim/device-roles', ui: 'dcim/device-roles',
      brief: (o, c) => roleBrief(c, o),
      full: (r, c) => ({
        ...ref(c, 'dcim/device-roles', 'dcim/device-roles', r, r.name), name: r.name, slug: r.slug, color: r.color, vm_role: true,
        config_template: null, ...(since(v, '4.3') ? { parent: null } : {}), description: '', ...owner(),
        ...common(r), device_count: this.devices.all().filter((d) => d.role === r).length, virtualmachine_count: 0,
        ...(since(v, '4.3') ? { comments: '', _depth: 0 } : {}),
      }),
      order: (a, b) => natural(a.name, b.name) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), name: charFilter((o) => o.name), slug: charFilter((o) => o.slug) },
    });
    const deviceTypeBrief = (c: Ctx, d: DeviceType): Obj => ({
      ...briefRef(c, 'dcim/device-types', d, d.model), manufacturer: manufacturerBrief(c, d.manufacturer), model: d.model, slug: d.slug, description: '',
      ...(v45 ? { device_count: this.devices.all().filter((x) => x.type === d).length } : {}),
    });
    this.deviceTypes = t<DeviceType>({
      objectName: 'DeviceType', api: 'dcim/device-types', ui: 'dcim/device-types',
      brief: (o, c) => deviceTypeBrief(c, o),
      full: (d, c) => ({
        ...ref(c, 'dcim/device-types', 'dcim/device-types', d, d.model), manufacturer: manufacturerBrief(c, d.manufacturer),
        default_platform: null, model: d.model, slug: d.slug, part_number: '', u_height: 2.0, exclude_from_utilization: false,
        is_full_depth: true, subdevice_role: null, airflow: { value: 'front-to-rear', label: 'Front to rear' }, weight: null, weight_unit: null,
        front_image: null, rear_image: null, description: '', ...owner(), comments: '', ...common(d),
        device_count: this.devices.all().filter((x) => x.type === d).length, console_port_template_count: 0,
        console_server_port_template_count: 0, power_port_template_count: 0, power_outlet_template_count: 0,
        interface_template_count: 0, front_port_template_count: 0, rear_port_template_count: 0, device_bay_template_count: 0,
        module_bay_template_count: 0, inventory_item_template_count: 0,
      }),
      order: (a, b) => natural(a.manufacturer.name, b.manufacturer.name) || natural(a.model, b.model) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), model: charFilter((o) => o.model), slug: charFilter((o) => o.slug) },
    });

    const deviceBrief = (c: Ctx, d: Device): Obj => ({ ...briefRef(c, 'dcim/devices', d, d.name), name: d.name, description: '' });
    const family = (ip: IpAddress): Obj => (ip.address.includes(':') ? { value: 6, label: 'IPv6' } : { value: 4, label: 'IPv4' });
    /** Device.oob_ip / primary_ip*: brief fields, plus dns_name and the NAT addresses from 4.6. */
    const deviceIp = (c: Ctx, ip: IpAddress): Obj => ({
      ...briefRef(c, 'ipam/ip-addresses', ip, ip.address), family: family(ip), address: ip.address,
      ...(since(v, '4.6') ? { nat_inside: null, nat_outside: [], dns_name: ip.dnsName } : {}), description: ip.description,
    });
    this.devices = t<Device>({
      objectName: 'Device', api: 'dcim/devices', ui: 'dcim/devices',
      brief: (o, c) => deviceBrief(c, o),
      full: (d, c) => {
        const o: Obj = {
          ...ref(c, 'dcim/devices', 'dcim/devices', d, d.name), name: d.name, device_type: deviceTypeBrief(c, d.type),
          role: roleBrief(c, d.role), tenant: null, platform: null, serial: d.serial, asset_tag: null, site: siteBrief(c, d.site),
          location: null, rack: null, position: null, face: null, latitude: null, longitude: null, parent_device: null,
          status: choice('active', STATUS_LABELS), airflow: null, primary_ip: null, primary_ip4: null, primary_ip6: null,
          oob_ip: d.oob ? deviceIp(c, d.oob) : null, cluster: null, virtual_chassis: null, vc_position: null, vc_priority: null,
          description: '', ...owner(), comments: '', config_template: null, config_context: {}, local_context_data: null,
          ...common(d),
          console_port_count: 0, console_server_port_count: 0, power_port_count: 0, power_outlet_count: 0,
          interface_count: this.interfaces.all().filter((i) => i.device === d).length, front_port_count: 0, rear_port_count: 0,
          device_bay_count: 0, module_bay_count: this.bays.all().filter((b) => b.device === d).length,
          inventory_item_count: this.items.all().filter((i) => i.device === d).length,
        };
        // DeviceViewSet serves DeviceSerializer (no config_context) when asked to exclude it.
        if (c.query.getAll('exclude').some((x) => x.split(',').includes('config_context'))) delete o.config_context;
        return o;
      },
      order: deviceOrder,
      filters: {
        id: numberFilter((o) => o.id), name: charFilter((o) => o.name), serial: charFilter((o) => o.serial, true),
      },
      search: (o) => [o.name, o.serial],
    });

    const ifaceDisplay = (i: Iface) => (i.label ? `${i.name} (${i.label})` : i.name);
    const macBrief = (c: Ctx, m: Mac): Obj => ({ ...briefRef(c, 'dcim/mac-addresses', m, m.mac), mac_address: m.mac, description: '' });
    /** InterfaceSerializer(nested=True): what IPAddress.assigned_object and MACAddress.assigned_object are. */
    const ifaceBrief = (c: Ctx, i: Iface): Obj => ({
      ...briefRef(c, 'dcim/interfaces', i, ifaceDisplay(i)), device: deviceBrief(c, i.device), name: i.name, description: i.description,
      cable: null, _occupied: false,
    });
    this.interfaces = t<Iface>({
      objectName: 'Interface', api: 'dcim/interfaces', ui: 'dcim/interfaces',
      brief: (o, c) => ifaceBrief(c, o),
      full: (i, c) => ({
        ...ref(c, 'dcim/interfaces', 'dcim/interfaces', i, ifaceDisplay(i)), device: deviceBrief(c, i.device), vdcs: [], module: null,
        name: i.name, label: i.label, type: choice(i.type, INTERFACE_TYPES), enabled: i.enabled, parent: null, bridge: null,
        ...(v45 ? { bridge_interfaces: [] } : {}), lag: null, mtu: null, mac_address: i.primary?.mac ?? null,
        primary_mac_address: i.primary ? macBrief(c, i.primary) : null, mac_addresses: i.macs.map((m) => macBrief(c, m)),
        speed: i.speed, duplex: null, wwn: null, mgmt_only: i.mgmtOnly, description: i.description, mode: null, rf_role: null,
        rf_channel: null, poe_mode: null, poe_type: null, rf_channel_frequency: null, rf_channel_width: null, tx_power: null,
        untagged_vlan: null, tagged_vlans: [], qinq_svlan: null, vlan_translation_policy: null, mark_connected: false,
        cable: null, cable_end: since(v, '4.6') ? null : '', wireless_link: null, link_peers: [], link_peers_type: null,
        wireless_lans: [], vrf: null, l2vpn_termination: null, connected_endpoints: null, connected_endpoints_type: null,
        connected_endpoints_reachable: null, ...owner(), ...common(i),
        count_ipaddresses: this.ips.all().filter((ip) => ip.iface === i).length, count_fhrp_groups: 0, _occupied: false,
      }),
      order: (a, b) => deviceOrder(a.device, b.device) || natural(a.name, b.name) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        // InterfaceFilterSet overrides these with method filters (virtual chassis peers): no 400 for an unknown device.
        device_id: numberFilter((o) => o.device.id),
        device: charFilter((o) => o.device.name),
        name: charFilter((o) => o.name),
        type: charFilter((o) => o.type),
        mgmt_only: boolFilter((o) => o.mgmtOnly),
        enabled: boolFilter((o) => o.enabled),
        mac_address: (values, rows) => {
          const want = new Set(values.map((x) => { try { return normalizeMac(x); } catch { return x; } }));
          return rows.filter((o) => o.macs.some((m) => want.has(m.mac)));
        },
      },
      search: (o) => [o.name, o.label, o.description],
    });
    this.macs = t<Mac>({
      objectName: 'MACAddress', api: 'dcim/mac-addresses', ui: 'dcim/mac-addresses', since: '4.2',
      brief: (o, c) => macBrief(c, o),
      full: (m, c) => ({
        ...ref(c, 'dcim/mac-addresses', 'dcim/mac-addresses', m, m.mac), mac_address: m.mac, assigned_object_type: 'dcim.interface',
        assigned_object_id: m.iface.id, assigned_object: ifaceBrief(c, m.iface), description: '', ...owner(), comments: '', ...common(m),
      }),
      order: (a, b) => (a.mac < b.mac ? -1 : a.mac > b.mac ? 1 : byId(a, b)),
      filters: {
        id: numberFilter((o) => o.id),
        mac_address: (values, rows) => {
          const want = new Set(values.map((x) => { try { return normalizeMac(x); } catch { return x; } }));
          return rows.filter((o) => want.has(o.mac));
        },
        assigned_object_id: numberFilter((o) => o.iface.id),
      },
    });
    this.ips = t<IpAddress>({
      objectName: 'IPAddress', api: 'ipam/ip-addresses', ui: 'ipam/ip-addresses',
      brief: (ip, c) => ({ ...briefRef(c, 'ipam/ip-addresses', ip, ip.address), family: family(ip), address: ip.address, description: ip.description }),
      full: (ip, c) => ({
        ...ref(c, 'ipam/ip-addresses', 'ipam/ip-addresses', ip, ip.address), family: family(ip), address: ip.address, vrf: null,
        tenant: null, status: choice(ip.status, IP_STATUS), role: ip.role ? choice(ip.role, IP_ROLE) : null,
        assigned_object_type: ip.assignedType, assigned_object_id: ip.assignedId,
        assigned_object: ip.iface ? ifaceBrief(c, ip.iface) : null, nat_inside: null, nat_outside: [],
        dns_name: ip.dnsName, description: ip.description, ...owner(), comments: ip.comments, ...common(ip),
      }),
      order: (a, b) => inetOrder(a.address, b.address) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        // filter_address: address__net_in (ipam/lookups.py NetIn): with a mask an inet match, without one HOST().
        address: (values, rows) => rows.filter((o) => values.some((val) => {
          const stored = splitInet(o.address);
          if (val.includes('/')) {
            const want = splitInet(val);
            return canonicalHost(val.split('/')[0]!) !== null && want.host === stored.host && want.len === stored.len;
          }
          return canonicalHost(val.trim()) === stored.host;
        })),
        // search_by_parent: address__net_host_contained of each IPNetwork(value.strip()).cidr; one bad value: none.
        parent: (values, rows) => {
          const nets = values.map((x) => parseNetwork(x.trim()));
          if (nets.some((n) => n === null)) return [];
          const v4nets = nets.filter((n): n is { host: number; len: number } => n !== null && n !== 'v6').map((n) => span(n.host, n.len));
          return rows.filter((o) => { const h = hostOf(o.address); return h !== null && v4nets.some((r) => h >= r.first && h <= r.last); });
        },
        device_id: numberFilter((o) => o.iface?.device.id ?? null),
        device: (values, rows) => rows.filter((o) => o.iface !== null && values.includes(o.iface.device.name)),
        interface_id: choiceById(() => this.interfaces.all(), (o) => o.iface?.id ?? null),
        assigned_object_id: numberFilter((o) => o.assignedId),
        assigned: boolFilter((o) => o.assignedType !== null || o.assignedId !== null),
        status: multipleChoice(IP_STATUS, (o) => o.status),
        role: multipleChoice(IP_ROLE, (o) => o.role ?? ''),
        ...charLookups<IpAddress>('dns_name', (o) => o.dnsName),
        ...charLookups<IpAddress>('description', (o) => o.description),
        // IPAddressFilterSet.search: dns_name or description icontains, or address istartswith.
        q: (values, rows) => {
          const term = values.at(-1)!;
          if (!term.trim()) return rows;
          const t = term.toLowerCase();
          return rows.filter((o) => o.dnsName.toLowerCase().includes(t) || o.description.toLowerCase().includes(t) || o.address.toLowerCase().startsWith(t));
        },
      },
    });

    const prefixFamily: Obj = { value: 4, label: 'IPv4' };
    const within = (inner: Prefix, outer: Prefix) => outer.len < inner.len && span(outer.net, outer.len).first === span(inner.net, outer.len).first;
    const children = (p: Prefix) => this.prefixes.all().filter((x) => within(x, p)).length;
    const depth = (p: Prefix) => this.prefixes.all().filter((x) => within(p, x)).length;
    /** Every custom field of ipam.prefix (CustomField ordering: group_name, weight, name), null where unset. */
    const prefixCustomFields = (p: Prefix): Obj => Object.fromEntries([...this.prefixCustomFieldNames].sort().map((n) => [n, p.customFields[n] ?? null]));
    const prefixNet = (value: string) => { const n = parseNetwork(value); return n === null || n === 'v6' ? n : span(n.host, n.len); };
    /** net_contains_or_equals (or, strict, net_contains): the prefix holds the network r. */
    const holds = (p: Prefix, r: { first: number; last: number }, strict: boolean) => {
      const own = span(p.net, p.len);
      return own.first <= r.first && own.last >= r.last && (!strict || own.first !== r.first || own.last !== r.last);
    };
    this.prefixes = t<Prefix>({
      objectName: 'Prefix', api: 'ipam/prefixes', ui: 'ipam/prefixes',
      brief: (p, c) => ({ ...briefRef(c, 'ipam/prefixes', p, p.prefix), family: prefixFamily, prefix: p.prefix, description: p.description, _depth: depth(p) }),
      full: (p, c) => ({
        ...ref(c, 'ipam/prefixes', 'ipam/prefixes', p, p.prefix), family: prefixFamily, prefix: p.prefix, vrf: null,
        scope_type: null, scope_id: null, scope: null, tenant: null, vlan: null, status: choice(p.status, PREFIX_STATUS), role: null,
        is_pool: p.isPool, mark_utilized: p.markUtilized, description: p.description, ...owner(), comments: '', tags: [],
        custom_fields: prefixCustomFields(p), created: p.created, last_updated: p.updated, children: children(p), _depth: depth(p),
      }),
      // (F('vrf').asc(nulls_first=True), 'prefix', 'pk'): no VRFs here.
      order: (a, b) => inetOrder(a.prefix, b.prefix) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        // filter_prefix: prefix__in=[IPNetwork(v)] with the host bits kept; an unparseable value is skipped.
        prefix: (values, rows) => {
          const want = values.map((x) => parseNetwork(x)).filter((n): n is { host: number; len: number } => n !== null && n !== 'v6');
          return rows.filter((o) => want.some((n) => n.host === o.net && n.len === o.len));
        },
        q: (values, rows) => {
          const value = values.at(-1)!;
          if (!value.trim()) return rows;
          const net = prefixNet(value.trim());
          return rows.filter((o) => o.description.toLowerCase().includes(value.toLowerCase()) || o.prefix.includes(value.trim())
            || (net !== null && net !== 'v6' && holds(o, net, false)));
        },
        status: multipleChoice(PREFIX_STATUS, (o) => o.status),
        is_pool: boolFilter((o) => o.isPool),
        mark_utilized: boolFilter((o) => o.markUtilized),
        ...charLookups<Prefix>('description', (o) => o.description),
        // search_contains: with a '/' net_contains_or_equals(cidr), without one net_contains(IPAddress(value)).
        contains: (values, rows) => {
          const value = values.at(-1)!.trim();
          if (!value) return rows;
          const net = value.includes('/') ? prefixNet(value) : (v4(value) !== null ? { first: v4(value)!, last: v4(value)! } : (canonicalHost(value) !== null ? 'v6' : null));
          return net === null || net === 'v6' ? [] : rows.filter((o) => holds(o, net, !value.includes('/')));
        },
        within: (values, rows) => {
          const net = prefixNet(values.at(-1)!.trim());
          return net === null || net === 'v6' ? [] : rows.filter((o) => { const r = span(o.net, o.len); return r.first >= net.first && r.last <= net.last && (r.first !== net.first || r.last !== net.last); });
        },
        within_include: (values, rows) => {
          const net = prefixNet(values.at(-1)!.trim());
          return net === null || net === 'v6' ? [] : rows.filter((o) => { const r = span(o.net, o.len); return r.first >= net.first && r.last <= net.last; });
        },
        mask_length: numberFilter((o) => o.len),
      },
    });

    const itemRoleBrief = (c: Ctx, r: ItemRole): Obj => ({ ...briefRef(c, 'dcim/inventory-item-roles', r, r.name), name: r.name, slug: r.slug, description: '' });
    this.itemRoles = t<ItemRole>({
      objectName: 'InventoryItemRole', api: 'dcim/inventory-item-roles', ui: 'dcim/inventory-item-roles',
      brief: (o, c) => itemRoleBrief(c, o),
      full: (r, c) => ({
        ...ref(c, 'dcim/inventory-item-roles', 'dcim/inventory-item-roles', r, r.name), name: r.name, slug: r.slug, color: r.color,
        description: '', ...owner(), ...(v45 ? { comments: '' } : {}), ...common(r),
        inventoryitem_count: this.items.all().filter((i) => i.role === r).length,
      }),
      order: (a, b) => natural(a.name, b.name) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), name: charFilter((o) => o.name), slug: charFilter((o) => o.slug) },
    });
    const itemDisplay = (i: Item) => (i.label ? `${i.name} (${i.label})` : i.name);
    this.items = t<Item>({
      objectName: 'InventoryItem', api: 'dcim/inventory-items', ui: 'dcim/inventory-items',
      brief: (i, c) => ({ ...briefRef(c, 'dcim/inventory-items', i, itemDisplay(i)), device: deviceBrief(c, i.device), name: i.name, description: i.description, _depth: 0 }),
      full: (i, c) => ({
        ...ref(c, 'dcim/inventory-items', 'dcim/inventory-items', i, itemDisplay(i)), device: deviceBrief(c, i.device), parent: null,
        name: i.name, label: i.label, status: choice('active', STATUS_LABELS), role: i.role ? itemRoleBrief(c, i.role) : null,
        manufacturer: i.manufacturer ? manufacturerBrief(c, i.manufacturer) : null, part_id: i.partId, serial: i.serial,
        asset_tag: i.assetTag, discovered: false, description: i.description, component_type: null, component_id: null,
        component: null, ...owner(), ...common(i), _depth: 0,
      }),
      order: (a, b) => a.device.id - b.device.id || natural(a.name, b.name) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        device_id: choiceById(() => this.devices.all(), (o) => o.device.id),
        device: choiceByField(() => this.devices.all(), (d) => d.name, (o) => o.device.name),
        name: charFilter((o) => o.name),
        role_id: choiceById(() => this.itemRoles.all(), (o) => o.role?.id ?? null),
        role: choiceByField(() => this.itemRoles.all(), (r) => r.slug, (o) => o.role?.slug ?? null),
        manufacturer_id: choiceById(() => this.manufacturers.all(), (o) => o.manufacturer?.id ?? null),
        manufacturer: choiceByField(() => this.manufacturers.all(), (m) => m.slug, (o) => o.manufacturer?.slug ?? null),
        serial: charFilter((o) => o.serial, true),
        part_id: charFilter((o) => o.partId),
      },
      search: (o) => [o.name, o.partId, o.serial, o.assetTag ?? '', o.description],
    });

    const profileBrief = (c: Ctx, p: Profile): Obj => ({ ...briefRef(c, 'dcim/module-type-profiles', p, p.name), name: p.name, description: '' });
    this.profiles = t<Profile>({
      objectName: 'ModuleTypeProfile', api: 'dcim/module-type-profiles', ui: 'dcim/module-type-profiles', since: '4.3',
      brief: (o, c) => profileBrief(c, o),
      full: (p, c) => ({
        ...ref(c, 'dcim/module-type-profiles', 'dcim/module-type-profiles', p, p.name), name: p.name, description: '',
        schema: (p.schema as unknown as Json) ?? null, ...owner(), comments: '', ...common(p),
      }),
      order: (a, b) => natural(a.name, b.name) || byId(a, b),
      filters: { id: numberFilter((o) => o.id), name: charFilter((o) => o.name) },
    });
    const moduleCount = (mt: ModuleType) => this.modules.all().filter((m) => m.type === mt).length;
    const moduleTypeBrief = (c: Ctx, mt: ModuleType): Obj => ({
      ...briefRef(c, 'dcim/module-types', mt, mt.model),
      ...(since(v, '4.3') ? { profile: mt.profile ? profileBrief(c, mt.profile) : null } : {}),
      manufacturer: manufacturerBrief(c, mt.manufacturer), model: mt.model, description: '',
      ...(v45 ? { module_count: moduleCount(mt) } : {}),
    });
    this.moduleTypes = t<ModuleType>({
      objectName: 'ModuleType', api: 'dcim/module-types', ui: 'dcim/module-types',
      brief: (o, c) => moduleTypeBrief(c, o),
      full: (mt, c) => ({
        ...ref(c, 'dcim/module-types', 'dcim/module-types', mt, mt.model),
        ...(since(v, '4.3') ? { profile: mt.profile ? profileBrief(c, mt.profile) : null } : {}),
        manufacturer: manufacturerBrief(c, mt.manufacturer), model: mt.model, part_number: '', airflow: null, weight: null,
        weight_unit: null, description: '',
        ...(since(v, '4.3') ? { attributes: (mt.attributes as Json) ?? null } : {}),
        ...owner(), comments: '', ...common(mt),
        ...(v45 ? { module_count: moduleCount(mt) } : {}),
        ...(since(v, '4.6') ? {
          console_port_template_count: 0, console_server_port_template_count: 0, power_port_template_count: 0,
          power_outlet_template_count: 0, interface_template_count: 0, front_port_template_count: 0,
          rear_port_template_count: 0, module_bay_template_count: 0,
        } : {}),
      }),
      // ('profile', 'manufacturer', 'model'): PostgreSQL sorts a null profile last.
      order: (a, b) => (a.profile ? 0 : 1) - (b.profile ? 0 : 1) || natural(a.profile?.name ?? '', b.profile?.name ?? '')
        || natural(a.manufacturer.name, b.manufacturer.name) || natural(a.model, b.model) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        model: charFilter((o) => o.model),
        manufacturer_id: choiceById(() => this.manufacturers.all(), (o) => o.manufacturer.id),
        manufacturer: choiceByField(() => this.manufacturers.all(), (m) => m.slug, (o) => o.manufacturer.slug),
        ...(since(v, '4.3') ? { profile_id: choiceById<ModuleType>(() => this.profiles.all(), (o) => o.profile?.id ?? null) } : {}),
      },
      search: (o) => [o.model],
    });
    const bayNested = (c: Ctx, b: Bay): Obj => ({ ...ref(c, 'dcim/module-bays', 'dcim/module-bays', b, b.name), name: b.name });
    const moduleDisplay = (m: Module) => `${m.bay.name}: ${m.type.model} (${m.id})`;
    this.bays = t<Bay>({
      objectName: 'ModuleBay', api: 'dcim/module-bays', ui: 'dcim/module-bays',
      brief: (b, c) => ({
        ...briefRef(c, 'dcim/module-bays', b, b.name), name: b.name,
        installed_module: b.module ? { ...briefRef(c, 'dcim/modules', b.module, moduleDisplay(b.module)), serial: b.module.serial, description: b.module.description } : null,
        ...(since(v, '4.6') ? { enabled: true } : {}), description: '', ...(since(v, '4.6') ? { _occupied: b.module !== null } : {}),
      }),
      full: (b, c) => ({
        ...ref(c, 'dcim/module-bays', 'dcim/module-bays', b, b.name), device: deviceBrief(c, b.device), module: null, name: b.name,
        installed_module: b.module ? { ...briefRef(c, 'dcim/modules', b.module, moduleDisplay(b.module)), serial: b.module.serial, description: b.module.description } : null,
        label: '', position: '', ...(since(v, '4.6') ? { enabled: true } : {}), description: '', ...owner(), ...common(b),
        ...(since(v, '4.6') ? { _occupied: b.module !== null } : {}),
      }),
      order: (a, b) => deviceOrder(a.device, b.device) || natural(a.name, b.name) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        device_id: choiceById(() => this.devices.all(), (o) => o.device.id),
        device: choiceByField(() => this.devices.all(), (d) => d.name, (o) => o.device.name),
        name: charFilter((o) => o.name),
      },
    });
    this.modules = t<Module>({
      objectName: 'Module', api: 'dcim/modules', ui: 'dcim/modules',
      brief: (m, c) => ({
        ...briefRef(c, 'dcim/modules', m, moduleDisplay(m)), device: deviceBrief(c, m.device), module_bay: bayNested(c, m.bay),
        module_type: moduleTypeBrief(c, m.type), description: m.description,
      }),
      full: (m, c) => ({
        ...ref(c, 'dcim/modules', 'dcim/modules', m, moduleDisplay(m)), device: deviceBrief(c, m.device), module_bay: bayNested(c, m.bay),
        module_type: moduleTypeBrief(c, m.type), status: choice(m.status, STATUS_LABELS), serial: m.serial, asset_tag: null,
        description: m.description, ...owner(), comments: '', ...common(m),
      }),
      order: (a, b) => deviceOrder(a.device, b.device) || natural(a.bay.name, b.bay.name) || byId(a, b),
      filters: {
        id: numberFilter((o) => o.id),
        device_id: choiceById(() => this.devices.all(), (o) => o.device.id),
        module_type_id: choiceById(() => this.moduleTypes.all(), (o) => o.type.id),
        module_bay_id: choiceById(() => this.bays.all(), (o) => o.bay.id),
        status: multipleChoice(STATUS_LABELS, (o) => o.status),
        serial: charFilter((o) => o.serial, true),
      },
      search: (o) => [o.device.name, o.serial],
    });

    this.tables = [this.manufacturers, this.sites, this.deviceRoles, this.deviceTypes, this.devices, this.interfaces,
      this.macs, this.ips, this.prefixes, this.itemRoles, this.items, this.profiles, this.moduleTypes, this.bays, this.modules];

    // What a fresh install plus a little setup holds.
    if (since(v, '4.3')) for (const p of shippedProfiles(v)) this.profiles.insert((b) => ({ ...b, name: p.name, schema: p.schema }));
    this.sites.insert((b) => ({ ...b, name: 'DC1', slug: 'dc1' }));
    this.deviceRoles.insert((b) => ({ ...b, name: 'Server', slug: 'server', color: '2196f3' }));
    const dell = this.manufacturer('Dell');
    this.deviceTypes.insert((b) => ({ ...b, manufacturer: dell, model: 'PowerEdge R760', slug: 'poweredge-r760' }));
  }

  /** created/last_updated as DRF renders them (microseconds, Z), distinct and increasing. */
  private stamp(): { created: string; updated: string } {
    const n = ++this.seq;
    const at = (ms: number, micro: number) => new Date(ms).toISOString().replace('Z', String(micro).padStart(3, '0') + 'Z');
    const created = Date.UTC(2025, 2, 14, 9, 26, 53, 117) + n * 61_733;
    return { created: at(created, (n * 389) % 1000), updated: at(created + 3_600_000 + n * 977, (n * 613) % 1000) };
  }

  manufacturer(name: string): Manufacturer {
    return this.manufacturers.all().find((m) => m.name === name)
      ?? this.manufacturers.insert((b) => ({ ...b, name, slug: slugify(name) }));
  }
  private itemRole(name: string): ItemRole {
    return this.itemRoles.all().find((r) => r.name === name)
      ?? this.itemRoles.insert((b) => ({ ...b, name, slug: slugify(name), color: '9e9e9e' }));
  }
  private profile(name: string): Profile {
    return this.profiles.all().find((p) => p.name === name) ?? this.profiles.insert((b) => ({ ...b, name, schema: null }));
  }
  private moduleType(f: NetboxModuleFixture): ModuleType {
    const manufacturer = this.manufacturer(f.manufacturer);
    // No profiles before 4.3; without a profile ModuleType.clean() sets attribute_data to None.
    const profile = f.profile && since(this.v, '4.3') ? this.profile(f.profile) : null;
    const attributes = profile ? f.attributes ?? null : null;
    const existing = this.moduleTypes.all().find((t) => t.manufacturer === manufacturer && t.model === f.model);
    if (existing) {
      if (existing.profile !== profile || JSON.stringify(existing.attributes) !== JSON.stringify(attributes)) {
        throw new Error(`module type ${f.manufacturer} ${f.model} is already defined with another profile or attributes (they belong to the type)`);
      }
      return existing;
    }
    // jsonschema.validate(attribute_data, profile.schema): a null attribute_data passes (the schemas have no type).
    if (profile?.schema && attributes) validateAttributes(profile, attributes);
    return this.moduleTypes.insert((b) => ({ ...b, manufacturer, model: f.model, profile, attributes }));
  }

  addPrefix(f: NetboxPrefixFixture): { id: number } {
    const n = parseNetwork(f.prefix);
    if (n === 'v6') throw new Error(`IPv6 prefixes are not simulated (got ${f.prefix})`);
    if (n === null || !f.prefix.includes('/')) throw new Error(`prefix must be an IPv4 network with its length (got ${f.prefix})`);
    // Prefix.clean(): no /0; ENFORCE_GLOBAL_UNIQUE (default True): no duplicate in the global table.
    if (n.len === 0) throw new Error('Cannot create prefix with /0 mask.');
    const net = span(n.host, n.len).first;
    const prefix = `${ipStr(net)}/${n.len}`;
    if (this.prefixes.all().some((p) => p.prefix === prefix)) throw new Error(`Duplicate prefix found in global table: ${prefix}`);
    const status = f.status ?? 'active';
    if (!(status in PREFIX_STATUS)) throw new Error(`unknown prefix status ${status}`);
    for (const k of Object.keys(f.customFields ?? {})) this.prefixCustomFieldNames.add(k);
    const p = this.prefixes.insert((b) => ({
      ...b, prefix, net, len: n.len, isPool: f.isPool ?? false, markUtilized: f.markUtilized ?? false, status,
      description: f.description ?? '', customFields: JSON.parse(JSON.stringify(f.customFields ?? {})) as Record<string, Json>,
    }), f.id);
    return { id: p.id };
  }

  addIpAddress(f: NetboxIpAddressFixture): { id: number } {
    if (!/^[^/]+\/\d{1,2}$/.test(f.address) || hostOf(f.address) === null || Number(f.address.split('/')[1]) > 32) {
      throw new Error(`address must be an IPv4 address with its prefix length, as NetBox stores it (got ${f.address})`);
    }
    const status = f.status ?? 'active';
    if (!(status in IP_STATUS)) throw new Error(`unknown IP address status ${status}`);
    if (f.role && !(f.role in IP_ROLE)) throw new Error(`unknown IP address role ${f.role}`);
    const host = hostOf(f.address)!;
    // ENFORCE_GLOBAL_UNIQUE: IPAddress.clean() refuses a second address with the same host in the global table.
    const dup = this.ips.all().find((x) => hostOf(x.address) === host);
    if (dup) throw new Error(`Duplicate IP address found in global table: ${dup.address}`);
    const ip = this.ips.insert((b) => ({
      ...b, address: `${ipStr(host)}/${f.address.split('/')[1]}`, iface: null, assignedType: null, assignedId: null, status,
      role: f.role ?? null, dnsName: (f.dnsName ?? '').toLowerCase(), description: f.description ?? '', comments: '',
    }), f.id);
    return { id: ip.id };
  }

  /** Prefix.get_available_ips() (netbox/ipam/models/ip.py), the first `limit` of them (all when limit <= 0). */
  availableIps(p: Prefix, limit: number): number[] {
    const { first, last } = span(p.net, p.len);
    const taken = new Set(this.ips.all().map((ip) => hostOf(ip.address)).filter((h): h is number => h !== null && h >= first && h <= last));
    // Pool and IPv4 /31-/32 sets are fully usable; otherwise the network and broadcast addresses are not.
    const full = p.isPool || p.len >= 31;
    const out: number[] = [];
    for (let h = full ? first : first + 1; h <= (full ? last : last - 1); h++) {
      if (taken.has(h)) continue;
      out.push(h);
      if (limit > 0 && out.length >= limit) break;
    }
    return out;
  }

  /** The created row of a validated IPAddressSerializer payload. */
  createIp(v: IpValues): IpAddress {
    return this.ips.insert((b) => ({
      ...b, updated: b.created, address: v.address, iface: v.iface, assignedType: v.assignedType, assignedId: v.assignedId,
      status: v.status, role: v.role, dnsName: v.dnsName.toLowerCase(), description: v.description, comments: v.comments,
    }));
  }

  /** IPAddressViewSet.destroy: Device.oob_ip is on_delete=SET_NULL. */
  deleteIp(ip: IpAddress): void {
    this.ips.rows.delete(ip.id);
    for (const d of this.devices.all()) if (d.oob === ip) d.oob = null;
  }

  addDevice(d: NetboxDeviceFixture): number {
    if (this.devices.all().some((x) => x.name === d.name)) throw new Error(`a device named ${d.name} exists`);
    if (!/^[^/]+\/\d{1,3}$/.test(d.bmcIp) || canonicalHost(d.bmcIp.split('/')[0]!) === null) {
      throw new Error(`bmcIp must be an address with its prefix length, as NetBox stores it (got ${d.bmcIp})`);
    }
    const names = new Set<string>();
    for (const i of d.interfaces ?? []) {
      if (names.has(i.name)) throw new Error(`interface ${i.name} appears twice on ${d.name}`);
      names.add(i.name);
    }
    const bays = new Set<string>();
    for (const m of d.modules ?? []) {
      if (bays.has(m.bay)) throw new Error(`module bay ${m.bay} holds two modules on ${d.name}`);
      bays.add(m.bay);
      if (m.status && !(m.status in STATUS_LABELS)) throw new Error(`unknown module status ${m.status}`);
    }
    const device = this.devices.insert((b) => ({
      ...b, name: d.name, serial: d.serial ?? '', type: this.deviceTypes.all()[0]!, role: this.deviceRoles.all()[0]!,
      site: this.sites.all()[0]!, oob: null,
    }), d.id);
    const bmcName = d.bmcInterface ?? 'bmc';
    const fixtures = [...(d.interfaces ?? [])];
    if (!fixtures.some((i) => i.name === bmcName)) fixtures.unshift({ name: bmcName, type: '1000base-t', mgmtOnly: true });
    for (const f of fixtures) {
      const iface = this.interfaces.insert((b) => ({
        ...b, device, name: f.name, label: f.label ?? '', type: f.type ?? '1000base-t', enabled: f.enabled ?? true,
        mgmtOnly: f.mgmtOnly ?? false, speed: f.speedKbps ?? null, description: f.description ?? '', macs: [], primary: null,
      }));
      if (f.mac) {
        const mac = this.macs.insert((b) => ({ ...b, mac: normalizeMac(f.mac!), iface }));
        iface.macs.push(mac);
        iface.primary = mac;
      }
      if (f.name === bmcName) {
        device.oob = this.ips.insert((b) => ({
          ...b, address: d.bmcIp, iface, assignedType: 'dcim.interface', assignedId: iface.id, status: 'active', role: null,
          dnsName: '', description: '', comments: '',
        }));
      }
    }
    for (const f of d.inventoryItems ?? []) {
      this.items.insert((b) => ({
        ...b, device, name: f.name, label: f.label ?? '', role: f.role ? this.itemRole(f.role) : null,
        manufacturer: f.manufacturer ? this.manufacturer(f.manufacturer) : null, partId: f.partId ?? '', serial: f.serial ?? '',
        assetTag: f.assetTag ?? null, description: f.description ?? '',
      }));
    }
    for (const f of d.modules ?? []) {
      const type = this.moduleType(f);
      const bay = this.bays.insert((b) => ({ ...b, device, name: f.bay, module: null }));
      bay.module = this.modules.insert((b) => ({
        ...b, device, bay, type, status: f.status ?? 'active', serial: f.serial ?? '', description: f.description ?? '',
      }));
    }
    return device.id;
  }
}

/** What ModuleType.clean() enforces through the profile's JSON schema (required, type, enum). */
function validateAttributes(p: Profile, attrs: Record<string, unknown>): void {
  const schema = p.schema!;
  for (const r of schema.required ?? []) if (attrs[r] === undefined || attrs[r] === null) throw new Error(`profile ${p.name}: attribute ${r} is required`);
  for (const [k, val] of Object.entries(attrs)) {
    const prop = schema.properties[k];
    if (!prop || val === null) continue;
    const ok = prop.type === 'integer' ? Number.isInteger(val) : prop.type === 'number' ? typeof val === 'number'
      : prop.type === 'boolean' ? typeof val === 'boolean' : prop.type === 'string' ? typeof val === 'string' : true;
    if (!ok) throw new Error(`profile ${p.name}: attribute ${k} must be of type ${prop.type}`);
    if (prop.enum && !prop.enum.includes(val as string | number)) throw new Error(`profile ${p.name}: attribute ${k} must be one of ${prop.enum.join(', ')}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Writes: DRF field semantics (rest_framework/fields.py, serializers.py) and NetBox's fields

/** What a validated IPAddressSerializer payload creates. */
interface IpValues {
  address: string; iface: Iface | null; assignedType: string | null; assignedId: number | null;
  status: string; role: string | null; dnsName: string; description: string; comments: string;
}
type FieldResult<T> = { ok: T } | { err: Json };

/** type(x).__name__ of the value Python's json module would have made. */
function pyType(x: Json): string {
  if (x === null) return 'NoneType';
  if (typeof x === 'boolean') return 'bool';
  if (typeof x === 'number') return Number.isInteger(x) ? 'int' : 'float';
  if (typeof x === 'string') return 'str';
  return Array.isArray(x) ? 'list' : 'dict';
}
/** repr(x) */
function pyRepr(x: Json): string {
  if (typeof x === 'string') return x.includes("'") && !x.includes('"') ? `"${x}"` : `'${x.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  if (Array.isArray(x)) return `[${x.map(pyRepr).join(', ')}]`;
  if (x !== null && typeof x === 'object') return `{${Object.entries(x).map(([k, v]) => `${pyRepr(k)}: ${pyRepr(v)}`).join(', ')}}`;
  return pyStr(x);
}
/** str(x) */
function pyStr(x: Json): string {
  if (x === null) return 'None';
  if (x === true) return 'True';
  if (x === false) return 'False';
  if (typeof x === 'string') return x;
  if (typeof x === 'number') return String(x);
  return pyRepr(x);
}
const isDict = (x: Json | undefined): x is { [k: string]: Json } => x !== null && typeof x === 'object' && !Array.isArray(x);

/** serializers.CharField (trim_whitespace) with the model field's validators first, as ModelSerializer builds it. */
function drfChar(value: Json, o: { allowBlank: boolean; maxLength?: number; validators?: ((s: string) => string | null)[] }): FieldResult<string> {
  if (typeof value === 'string' && value.trim() === '') return o.allowBlank ? { ok: '' } : { err: ['This field may not be blank.'] };
  if (value === null) return { err: ['This field may not be null.'] };
  if (typeof value === 'boolean' || typeof value === 'object') return { err: ['Not a valid string.'] };
  const s = pyStr(value).trim();
  const errors: string[] = [];
  for (const check of o.validators ?? []) { const e = check(s); if (e) errors.push(e); }
  if (o.maxLength !== undefined && [...s].length > o.maxLength) errors.push(`Ensure this field has no more than ${o.maxLength} characters.`);
  if (s.includes('\0')) errors.push('Null characters are not allowed.');
  const surrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.exec(s);
  if (surrogate) errors.push(`Surrogate characters are not allowed: U+${surrogate[0].charCodeAt(0).toString(16).toUpperCase()}.`);
  return errors.length ? { err: errors } : { ok: s };
}
/** serializers.IntegerField */
function drfInt(value: Json, o: { allowNull: boolean; min?: number }): FieldResult<number | null> {
  if (value === null) return o.allowNull ? { ok: null } : { err: ['This field may not be null.'] };
  if (typeof value === 'string' && value.length > 1000) return { err: ['String value too large.'] };
  const n = typeof value === 'boolean' || typeof value === 'object' ? null : pyInt(pyStr(value).replace(/\.0*\s*$/, ''));
  if (n === null) return { err: ['A valid integer is required.'] };
  if (o.min !== undefined && n < o.min) return { err: [`Ensure this value is greater than or equal to ${o.min}.`] };
  return { ok: n };
}
/** netbox/netbox/api/fields.py ChoiceField (null is blank unless allow_null). */
function nbChoice(value: Json, choices: Record<string, string>, allowBlank: boolean): FieldResult<string> {
  const data = value === null ? '' : value;
  if (data === '') return allowBlank ? { ok: '' } : { err: ['This field may not be blank.'] };
  if (typeof data === 'object') return { err: ['Value must be passed directly (e.g. "foo": 123); do not use a dictionary or list.'] };
  let d: Json = data;
  if (typeof d === 'string') {
    if (d.toLowerCase() === 'true') d = true;
    else if (d.toLowerCase() === 'false') d = false;
    else d = pyInt(d) ?? d;
  }
  if (typeof d === 'string' && Object.prototype.hasOwnProperty.call(choices, d)) return { ok: d };
  return { err: [`${pyStr(d)} is not a valid choice.`] };
}
/** utilities/api.py get_related_object_by_attrs() over a model that has no rows here (Tenant, Owner, Tag). */
function relatedNotFound(value: Json): string {
  if (isDict(value)) {
    const flat = (d: { [k: string]: Json }, prefix: string): [string, Json][] =>
      Object.entries(d).flatMap(([k, v]) => (isDict(v) ? flat(v, `${prefix}${k}__`) : [[`${prefix}${k}`, v] as [string, Json]]));
    return `Related object not found using the provided attributes: ${pyRepr(Object.fromEntries(flat(value, '')))}`;
  }
  const pk = typeof value === 'number' ? Math.trunc(value) : typeof value === 'boolean' ? Number(value) : typeof value === 'string' ? pyInt(value) : null;
  if (pk === null || !Number.isFinite(pk)) {
    return `Related objects must be referenced by numeric ID or by dictionary of attributes. Received an unrecognized value: ${pyStr(value)}`;
  }
  return `Related object not found using the provided numeric ID: ${pk}`;
}
/** ipam/validators.py DNSValidator */
const dnsValidator = (s: string) => (/^([0-9A-Za-z_-]+|\*)(\.[0-9A-Za-z_-]+)*\.?$/.test(s) ? null
  : 'Only alphanumeric characters, asterisks, hyphens, periods, and underscores are allowed in DNS names');

/**
 * The write serializer of AvailableIPAddressesView for one requested object: 4.2/4.3
 * AvailableIPSerializer (description: CharField(required=False)), 4.5/4.6 AvailableIPRequestSerializer
 * (prefix_length). {} when it is valid.
 */
function availableIpRequestErrors(item: Json, v: NetboxVersion, parent: Prefix): Json {
  if (item === null) return ['This field may not be null.'];
  if (!isDict(item)) return { non_field_errors: [`Invalid data. Expected a dictionary, but got ${pyType(item)}.`] };
  if (!since(v, '4.5')) {
    if (!('description' in item)) return {};
    const d = drfChar(item.description!, { allowBlank: false });
    return 'err' in d ? { description: d.err } : {};
  }
  if (!('prefix_length' in item)) return {};
  const n = drfInt(item.prefix_length!, { allowNull: false });
  if ('err' in n) return { prefix_length: n.err };
  // Raised as ValidationError({'prefix_length': '...'}): a string, not a list. The over-32 text is the source's.
  if (n.ok! < parent.len) return { prefix_length: `Prefix length must be greater than or equal to the parent mask length (${parent.len})` };
  if (n.ok! > 32) return { prefix_length: `Invalid prefix length (${n.ok}) for IPv6` };
  return {};
}

/** IPAddressSerializer(data=...).is_valid() for a payload whose address and vrf the view has set. */
function validateIp(item: { [k: string]: Json }, address: string, v: NetboxVersion, store: Store): { errors: Obj } | { values: IpValues } {
  const errors: Obj = {};
  const has = (k: string) => Object.prototype.hasOwnProperty.call(item, k);
  const values: IpValues = { address, iface: null, assignedType: null, assignedId: null, status: 'active', role: null, dnsName: '', description: '', comments: '' };
  // Meta.fields order: address, vrf, tenant, status, role, assigned_object_type, assigned_object_id, nat_inside,
  // dns_name, description, owner, comments, tags, custom_fields.
  if (has('tenant') && item.tenant !== null) errors.tenant = [relatedNotFound(item.tenant!)];
  if (has('status')) { const r = nbChoice(item.status!, IP_STATUS, false); if ('err' in r) errors.status = r.err; else values.status = r.ok; }
  if (has('role')) { const r = nbChoice(item.role!, IP_ROLE, true); if ('err' in r) errors.role = r.err; else values.role = r.ok || null; }
  if (has('assigned_object_type') && item.assigned_object_type !== null) {
    const t = item.assigned_object_type!;
    if (typeof t !== 'string' || t.split('.').length !== 2) errors.assigned_object_type = ["Invalid value. Specify a content type as '<app_label>.<model_name>'."];
    else if (!IP_ASSIGNMENT_TYPES.includes(t)) errors.assigned_object_type = [`Invalid content type: ${t}`];
    else values.assignedType = t;
  }
  if (has('assigned_object_id')) {
    const r = drfInt(item.assigned_object_id!, { allowNull: true, min: 0 });
    if ('err' in r) errors.assigned_object_id = r.err; else values.assignedId = r.ok;
  }
  if (has('nat_inside') && item.nat_inside !== null) errors.nat_inside = ['nat_inside is not simulated by the NetBox fixture'];
  if (has('dns_name')) {
    const r = drfChar(item.dns_name!, { allowBlank: true, maxLength: 255, validators: [dnsValidator] });
    if ('err' in r) errors.dns_name = r.err; else values.dnsName = r.ok;
  }
  if (has('description')) { const r = drfChar(item.description!, { allowBlank: true, maxLength: 200 }); if ('err' in r) errors.description = r.err; else values.description = r.ok; }
  if (since(v, '4.5') && has('owner') && item.owner !== null) errors.owner = [relatedNotFound(item.owner!)];
  if (has('comments')) { const r = drfChar(item.comments!, { allowBlank: true }); if ('err' in r) errors.comments = r.err; else values.comments = r.ok; }
  if (has('tags')) {
    const tags = item.tags!;
    if (tags === null) errors.tags = ['This field may not be null.'];
    else if (!Array.isArray(tags)) errors.tags = { non_field_errors: [`Expected a list of items but got type "${pyType(tags)}".`] };
    else {
      // A tag that is not found raises Django's ValidationError, which the list does not catch: the first wins.
      const found = tags.find((x) => x !== null);
      if (found !== undefined) errors.tags = [relatedNotFound(found)];
      else if (tags.length) errors.tags = tags.map(() => ['This field may not be null.']);
    }
  }
  if (has('custom_fields')) {
    const cf = item.custom_fields!;
    if (!isDict(cf)) errors.custom_fields = ['Invalid data format. Custom field data must be passed as a dictionary mapping field names to their values.'];
    else if (since(v, '4.5') && Object.keys(cf).length) {
      // No custom field exists for ipam.ipaddress here; 4.5.8+ refuses unknown names (4.2/4.3 store them unseen).
      errors.custom_fields = Object.fromEntries(Object.keys(cf).sort().map((k) => [k, `Custom field '${k}' does not exist for this object type.`]));
    }
  }
  if (Object.keys(errors).length) return { errors };
  // ValidatedModelSerializer.validate(): IPAddress.full_clean().
  if (values.assignedType === 'dcim.interface' && values.assignedId !== null) values.iface = store.interfaces.rows.get(values.assignedId) ?? null;
  const host = hostOf(address)!;
  const len = Number(address.split('/')[1]);
  if (values.iface && len < 31) {
    const { first, last } = span(host, len);
    if (host === first) return { errors: { non_field_errors: [`${ipStr(host)} is a network ID, which may not be assigned to an interface.`] } };
    if (host === last) return { errors: { non_field_errors: [`${ipStr(host)} is a broadcast address, which may not be assigned to an interface.`] } };
  }
  if (values.status === 'slaac') return { errors: { status: ['Only IPv6 addresses can be assigned SLAAC status'] } };
  return { values };
}

/**
 * The message of Python 3.12's json.loads() for a text JSON.parse refused (json/decoder.py and
 * scanner.py: "<what>: line L column C (char N)"), with DRF's parse_constant refusing NaN/Infinity.
 */
function pythonJsonError(text: string): string {
  class Stop extends Error { constructor(readonly what: string, readonly at: number) { super(what); } }
  const ws = (i: number) => { while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++; return i; };
  const str = (start: number): number => {
    let i = start + 1;
    for (;;) {
      if (i >= text.length) throw new Stop('Unterminated string starting at', start);
      const ch = text[i]!;
      if (ch === '"') return i + 1;
      if (ch < ' ') throw new Stop('Invalid control character at', i);
      if (ch === '\\') {
        const e = text[i + 1];
        if (e === undefined) throw new Stop('Unterminated string starting at', start);
        if (e === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) throw new Stop('Invalid \\uXXXX escape', i + 1);
          i += 6;
          continue;
        }
        if (!'"\\/bfnrt'.includes(e)) throw new Stop('Invalid \\escape', i); // the C scanner (Modules/_json.c) gives no repr
        i += 2;
        continue;
      }
      i++;
    }
  };
  const value = (i: number): number => {
    const ch = text[i];
    if (ch === '"') return str(i);
    if (ch === '{') {
      i = ws(i + 1);
      if (text[i] === '}') return i + 1;
      for (;;) {
        if (text[i] !== '"') throw new Stop('Expecting property name enclosed in double quotes', i);
        i = ws(str(i));
        if (text[i] !== ':') throw new Stop("Expecting ':' delimiter", i);
        i = ws(value(ws(i + 1)));
        if (text[i] === '}') return i + 1;
        if (text[i] !== ',') throw new Stop("Expecting ',' delimiter", i);
        i = ws(i + 1);
      }
    }
    if (ch === '[') {
      i = ws(i + 1);
      if (text[i] === ']') return i + 1;
      for (;;) {
        i = ws(value(i));
        if (text[i] === ']') return i + 1;
        if (text[i] !== ',') throw new Stop("Expecting ',' delimiter", i);
        i = ws(i + 1);
      }
    }
    for (const [word, constant] of [['null', false], ['true', false], ['false', false], ['NaN', true], ['Infinity', true], ['-Infinity', true]] as const) {
      if (text.startsWith(word, i)) {
        if (constant) throw new Stop(`Out of range float values are not JSON compliant: '${word}'`, -1);
        return i + word.length;
      }
    }
    const m = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?/.exec(text.slice(i));
    if (!m) throw new Stop('Expecting value', i);
    return i + m[0].length;
  };
  try {
    const end = ws(value(ws(0)));
    if (end !== text.length) throw new Stop('Extra data', end);
    return 'Expecting value: line 1 column 1 (char 0)'; // not reached for a text JSON.parse refused
  } catch (e) {
    if (!(e instanceof Stop)) throw e;
    if (e.at < 0) return e.what;
    const pos = [...text.slice(0, e.at)].length; // Python counts code points
    const before = text.slice(0, e.at);
    const line = before.split('\n').length;
    const col = line === 1 ? pos + 1 : [...before.slice(before.lastIndexOf('\n') + 1)].length + 1;
    return `${e.what}: line ${line} column ${col} (char ${pos})`;
  }
}

/**
 * DRF's request.data for a JSON body (rest_framework/request.py _parse, parsers.JSONParser): no body or
 * no Content-Type is {}; a type no parser takes is 415.
 */
function parseBody(body: Buffer, contentType: string | undefined): { data: Json } | { reply: Reply } {
  if (!body.length || !contentType) return { data: {} };
  const [type, sub] = (contentType.split(';')[0] ?? '').trim().toLowerCase().split('/');
  const json = (type === 'application' || type === '*') && (sub === 'json' || sub === '*');
  if (!json) return { reply: { status: 415, body: { detail: `Unsupported media type "${contentType}" in request.` } } };
  const text = body.toString('utf8');
  try {
    return { data: JSON.parse(text) as Json };
  } catch {
    return { reply: { status: 400, body: { detail: `JSON parse error - ${pythonJsonError(text)}` } } };
  }
}

// ---------------------------------------------------------------------------------------------
// URLs as DRF rebuilds them (rest_framework/utils/urls.py replace_query_param / remove_query_param)

function quotePlus(s: string): string {
  let out = '';
  for (const byte of Buffer.from(s, 'utf8')) {
    const ch = String.fromCharCode(byte);
    if (/[A-Za-z0-9_.~-]/.test(ch)) out += ch;
    else if (ch === ' ') out += '+';
    else out += '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}
function unquotePlus(s: string): string {
  const t = s.replace(/\+/g, ' ');
  try { return decodeURIComponent(t); } catch { return t.replace(/%([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))); }
}
/** parse_qs(query, keep_blank_values=True): key -> values, keys in first-seen order. */
function parseQs(query: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const part of query.split('&')) {
    if (!part) continue;
    const i = part.indexOf('=');
    const k = unquotePlus(i < 0 ? part : part.slice(0, i));
    const val = i < 0 ? '' : unquotePlus(part.slice(i + 1));
    out.set(k, [...(out.get(k) ?? []), val]);
  }
  return out;
}
function rebuild(url: string, edit: (q: Map<string, string[]>) => void): string {
  const qi = url.indexOf('?');
  const base = qi < 0 ? url : url.slice(0, qi);
  const q = parseQs(qi < 0 ? '' : url.slice(qi + 1));
  edit(q);
  const query = [...q.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .flatMap(([k, vs]) => vs.map((val) => `${quotePlus(k)}=${quotePlus(val)}`)).join('&');
  return query ? `${base}?${query}` : base;
}
const replaceQueryParam = (url: string, key: string, val: string | number) => rebuild(url, (q) => { q.set(key, [String(val)]); });
const removeQueryParam = (url: string, key: string) => rebuild(url, (q) => { q.delete(key); });

// ---------------------------------------------------------------------------------------------
// The server

interface Reply { status: number; body?: unknown; html?: string; headers?: Record<string, string> }

function matches(m: string | RegExp | undefined, path: string): boolean {
  if (m === undefined) return true;
  if (typeof m === 'string') return path.includes(m);
  m.lastIndex = 0;
  return m.test(path);
}

function alnum(n: number): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(n)].map((b) => chars[b % chars.length]).join('');
}

const NOT_FOUND_PAGE = '<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="UTF-8"><title>Page Not Found | NetBox</title></head>\n'
  + '<body><div class="page-body"><h1><i class="mdi mdi-alert"></i> Page Not Found</h1>\n'
  + '<p>The requested page does not exist.</p></div></body>\n</html>\n';

export async function startNetboxSim(opts: NetboxSimOptions = {}): Promise<NetboxSim> {
  const version: NetboxVersion = opts.version ?? '4.6';
  if (!(version in RANK)) throw new Error(`unsupported NetBox version ${String(version)}`);
  const pageSize = opts.pageSize ?? 50;
  const maxPageSize = opts.maxPageSize ?? 1000;
  const loginRequired = opts.loginRequired ?? true;
  const release = RELEASE[version];
  const store = new Store(version);
  for (const d of opts.devices ?? []) store.addDevice(d);
  for (const p of opts.prefixes ?? []) store.addPrefix(p);

  const v1Token = randomBytes(20).toString('hex');
  const expiredV1Token = randomBytes(20).toString('hex');
  const readOnlyV1Token = randomBytes(20).toString('hex');
  const v2Key = alnum(12); const v2Secret = alnum(40);
  const expiredV2Key = alnum(12); const expiredV2Secret = alnum(40);
  const readOnlyV2Key = alnum(12); const readOnlyV2Secret = alnum(40);
  // users/models/tokens.py: write_enabled (default True) on both token versions.
  const v1Tokens = new Map<string, { expired: boolean; write: boolean }>([
    [v1Token, { expired: false, write: true }], [expiredV1Token, { expired: true, write: true }], [readOnlyV1Token, { expired: false, write: false }],
  ]);
  const v2Tokens = new Map<string, { token: string; expired: boolean; write: boolean }>([
    [v2Key, { token: v2Secret, expired: false, write: true }], [expiredV2Key, { token: expiredV2Secret, expired: true, write: true }],
    [readOnlyV2Key, { token: readOnlyV2Secret, expired: false, write: false }],
  ]);

  const requests: NetboxSim['requests'] = [];
  let faults: NetboxFaults = {};
  let fail500Left = 0;
  const timers = new Set<NodeJS.Timeout>();
  const sockets = new Set<Socket>();

  /** The user (through a token that may write, or a read-only one), or 'anon', or the AuthenticationFailed detail. */
  function authenticate(header: string | undefined): 'user' | 'reader' | 'anon' | { fail: string } {
    const auth = (header ?? '').trim().split(/\s+/).filter(Boolean);
    if (!auth.length) return 'anon';
    if (!since(version, '4.5')) {
      // rest_framework.authentication.TokenAuthentication, keyword 'Token'.
      if (auth[0]!.toLowerCase() !== 'token') return 'anon';
      if (auth.length === 1) return { fail: 'Invalid token header. No credentials provided.' };
      if (auth.length > 2) return { fail: 'Invalid token header. Token string should not contain spaces.' };
      const t = v1Tokens.get(auth[1]!);
      if (!t) return { fail: 'Invalid token' };
      if (t.expired) return { fail: 'Token expired' };
      return t.write ? 'user' : 'reader';
    }
    if (!['token', 'bearer'].includes(auth[0]!.toLowerCase())) return 'anon';
    if (auth.length !== 2) return { fail: 'Invalid authorization header: Must be in the form "Bearer <key>.<token>" or "Token <token>"' };
    const value = auth[1]!;
    if (!value.startsWith('nbt_')) {
      const t = v1Tokens.get(value);
      if (!t) return { fail: 'Invalid v1 token' };
      return t.expired ? { fail: 'Token expired' } : t.write ? 'user' : 'reader';
    }
    const rest = value.slice('nbt_'.length);
    const dot = rest.indexOf('.');
    if (dot < 0) return { fail: "Invalid authorization header: Could not parse key from v2 token. Did you mean to use 'Token' instead of 'Bearer'?" };
    const t = v2Tokens.get(rest.slice(0, dot));
    if (!t || t.token !== rest.slice(dot + 1)) return { fail: 'Invalid v2 token' };
    return t.expired ? { fail: 'Token expired' } : t.write ? 'user' : 'reader';
  }

  function paginate(rows: Base[], q: URLSearchParams, absolute: string, render: (o: Base) => Obj): Reply {
    const cursorMode = since(version, '4.6') && q.has('start');
    let start: number | null = null;
    if (cursorMode) {
      start = pyInt(q.get('start'));
      if (start === null || start < 0) return { status: 400, body: ["Invalid 'start' parameter: must be a non-negative integer."] };
    }
    let limit: number;
    if (since(version, '4.6')) {
      limit = maxPageSize ? Math.min(pageSize, maxPageSize) : pageSize;
      const asked = pyInt(q.get('limit'));
      if (q.has('limit') && asked !== null && asked >= 0) limit = maxPageSize ? (asked === 0 ? maxPageSize : Math.min(maxPageSize, asked)) : asked;
    } else {
      const asked = pyInt(q.get('limit'));
      if (!q.has('limit')) limit = Math.min(pageSize, maxPageSize); // min(PAGINATE_COUNT, MAX_PAGE_SIZE), 0 included
      else if (asked === null || asked < 0) limit = pageSize;
      else limit = maxPageSize ? (asked === 0 ? maxPageSize : Math.min(asked, maxPageSize)) : asked;
    }
    if (start !== null) {
      if (q.has('offset')) return { status: 400, body: ["'start' and 'offset' are mutually exclusive."] };
      if (q.has('ordering')) return { status: 400, body: ['Ordering cannot be specified in conjunction with cursor-based pagination.'] };
      const from = start;
      const all = rows.filter((o) => o.id >= from).sort(byId);
      const page = limit ? all.slice(0, limit) : all;
      let next: string | null = null;
      if (limit && page.length >= limit) {
        next = replaceQueryParam(absolute, 'start', page.at(-1)!.id + 1);
        next = replaceQueryParam(next, 'limit', limit);
        next = removeQueryParam(next, 'offset');
      }
      return { status: 200, body: { count: null, next, previous: null, results: page.map(render) } };
    }
    const count = rows.length;
    const offsetAsked = pyInt(q.get('offset'));
    const offset = offsetAsked !== null && offsetAsked >= 0 ? offsetAsked : 0;
    const page = count === 0 || offset > count ? [] : limit ? rows.slice(offset, offset + limit) : rows.slice(offset);
    let next: string | null = null;
    let previous: string | null = null;
    if (limit) {
      if (offset + limit < count) next = replaceQueryParam(replaceQueryParam(absolute, 'limit', limit), 'offset', offset + limit);
      if (offset > 0) {
        const url = replaceQueryParam(absolute, 'limit', limit);
        previous = offset - limit <= 0 ? removeQueryParam(url, 'offset') : replaceQueryParam(url, 'offset', offset - limit);
      }
    }
    return { status: 200, body: { count, next, previous, results: page.map(render) } };
  }

  /** ?brief (any non-empty value, as NetBox's BriefModeMixin reads it), ?fields, ?omit (4.5+). */
  function renderer<T extends Base>(spec: Spec<T>, c: Ctx): (o: T) => Obj {
    const q = c.query;
    const fields = q.getAll('fields').flatMap((f) => f.split(',')).map((f) => f.trim()).filter(Boolean);
    const omit = since(version, '4.5') ? q.getAll('omit').flatMap((f) => f.split(',')).map((f) => f.trim()).filter(Boolean) : [];
    return (o) => {
      let out = fields.length ? spec.full(o, c) : q.get('brief') ? spec.brief(o, c) : spec.full(o, c);
      if (fields.length) out = Object.fromEntries(Object.entries(out).filter(([k]) => fields.includes(k)));
      if (omit.length) out = Object.fromEntries(Object.entries(out).filter(([k]) => !omit.includes(k)));
      return out;
    };
  }

  function list<T extends Base>(table: Table<T>, c: Ctx, absolute: string): Reply {
    const spec = table.spec;
    const q = c.query;
    let rows = table.all();
    const errors: Record<string, string[]> = {};
    for (const [name, filter] of Object.entries(spec.filters)) {
      const values = q.getAll(name).filter((x) => x !== '');
      if (!values.length) continue;
      try { rows = filter(values, rows, store); } catch (e) {
        if (e instanceof FilterError) errors[name] = e.messages; else throw e;
      }
    }
    if (Object.keys(errors).length) return { status: 400, body: errors };
    const term = q.get('q')?.trim().toLowerCase();
    if (term && spec.search) rows = rows.filter((o) => spec.search!(o).some((s) => s.toLowerCase().includes(term)));
    const render = renderer(spec, c);
    rows.sort(spec.order);
    const ordering = (q.get('ordering') ?? '').split(',').map((x) => x.trim()).filter(Boolean);
    if (ordering.length && !(since(version, '4.6') && q.has('start'))) {
      // OrderingFilter: unknown fields are dropped; scalars and choice values only here.
      const keyed = rows.map((o) => ({ o, r: spec.full(o, c) }));
      const key = (r: Obj, f: string): string | number | null => {
        const x = r[f];
        if (x && typeof x === 'object' && !Array.isArray(x) && 'value' in x) return x.value as string | number;
        return typeof x === 'string' || typeof x === 'number' ? x : null;
      };
      const terms = ordering.map((t) => ({ f: t.replace(/^-/, ''), desc: t.startsWith('-') }))
        .filter((t) => keyed.length && t.f in keyed[0]!.r);
      keyed.sort((a, b) => {
        for (const t of terms) {
          const x = key(a.r, t.f); const y = key(b.r, t.f);
          const cmp = typeof x === 'string' && typeof y === 'string' ? natural(x, y) : (x === y ? 0 : x === null ? 1 : y === null ? -1 : x < y ? -1 : 1);
          if (cmp) return t.desc ? -cmp : cmp;
        }
        return 0;
      });
      rows = keyed.map((k) => k.o);
    }
    return paginate(rows, q, absolute, render as (o: Base) => Obj);
  }

  function statusBody(): Obj {
    const apps: Obj = { ...release.apps };
    if (since(version, '4.5')) {
      return { 'django-version': release.django, hostname: 'netbox-7c9f8d6b5-x2lqz', installed_apps: apps, 'netbox-version': release.full, 'netbox-full-version': release.full, plugins: {}, 'python-version': release.python, 'rq-workers-running': 1 };
    }
    if (since(version, '4.3')) {
      return { 'django-version': release.django, 'installed-apps': apps, 'netbox-version': release.full, 'netbox-full-version': release.full, plugins: {}, 'python-version': release.python, 'rq-workers-running': 1 };
    }
    return { 'django-version': release.django, 'installed-apps': apps, 'netbox-version': release.full, plugins: {}, 'python-version': release.python, 'rq-workers-running': 1 };
  }

  const tablesByApi = new Map(store.tables.filter((t) => !t.spec.since || since(version, t.spec.since)).map((t) => [t.spec.api, t]));

  type Route = { kind: 'root' } | { kind: 'status' } | { kind: 'list'; table: Table<Base> } | { kind: 'detail'; table: Table<Base>; pk: string }
    | { kind: 'available-ips'; pk: number };
  function route(path: string): Route | null {
    if (path === '/api/') return { kind: 'root' };
    if (path === '/api/status/') return { kind: 'status' };
    // ipam/api/urls.py: path('prefixes/<int:pk>/available-ips/', ...)
    const avail = /^\/api\/ipam\/prefixes\/(\d+)\/available-ips\/$/.exec(path);
    if (avail) return { kind: 'available-ips', pk: Number(avail[1]) };
    const m = /^\/api\/([a-z]+\/[a-z-]+)\/(?:([^/.]+)\/)?$/.exec(path);
    if (!m) return null;
    const table = tablesByApi.get(m[1]!) as Table<Base> | undefined;
    if (!table) return null;
    return m[2] === undefined ? { kind: 'list', table } : { kind: 'detail', table, pk: m[2] };
  }

  /** AvailableIPAddressesView.get / .post (netbox/ipam/api/views.py AvailableObjectsView). */
  function availableIps(req: http.IncomingMessage, body: Buffer, pk: number, c: Ctx): Reply {
    const allow = { Allow: 'GET, POST, HEAD, OPTIONS' };
    const parent = store.prefixes.rows.get(pk);
    if (req.method === 'GET' || req.method === 'HEAD') {
      if (!parent) return { status: 404, body: { detail: 'No Prefix matches the given query.' }, headers: allow };
      // get_results_limit(): int(limit) or MAX_PAGE_SIZE, capped at MAX_PAGE_SIZE; a ValueError means PAGINATE_COUNT.
      const asked = c.query.has('limit') ? pyInt(c.query.getAll('limit').at(-1)!) : pageSize;
      let limit = asked === null ? pageSize : asked || maxPageSize;
      if (maxPageSize) limit = Math.min(limit, maxPageSize);
      const ips = store.availableIps(parent, limit);
      return { status: 200, body: ips.map((h) => ({ family: 4, address: `${ipStr(h)}/${parent.len}`, vrf: null })), headers: allow };
    }
    if (req.method !== 'POST') return { status: 405, body: { detail: `Method "${req.method}" not allowed.` }, headers: allow };
    if (!parent) return { status: 404, body: { detail: 'No Prefix matches the given query.' }, headers: allow };
    const parsed = parseBody(body, req.headers['content-type']);
    if ('reply' in parsed) return { ...parsed.reply, headers: allow };
    const many = Array.isArray(parsed.data);
    const requested: Json[] = many ? (parsed.data as Json[]) : [parsed.data];
    // write_serializer_class(data=requested, many=True): a positional list of errors.
    const first = requested.map((item) => availableIpRequestErrors(item, version, parent));
    if (first.some((e) => !isDict(e) || Object.keys(e).length)) return { status: 400, body: first, headers: allow };
    // Under the advisory lock: get_available_objects(parent, limit=len(requested)).
    const free = store.availableIps(parent, requested.length);
    if (free.length < requested.length) {
      return { status: 409, body: { detail: 'Insufficient resources are available to satisfy the request' }, headers: allow };
    }
    // prep_object_data(): address = '<free ip>/<prefix_length (4.5.1+) or the parent's mask length>', vrf = the parent's.
    const results = (requested as { [k: string]: Json }[]).map((item, i) => {
      const len = since(version, '4.5') && item.prefix_length !== undefined ? drfInt(item.prefix_length, { allowNull: false }) : null;
      const address = `${ipStr(free[i]!)}/${len && 'ok' in len && len.ok ? len.ok : parent.len}`;
      return validateIp(item, address, version, store);
    });
    if (results.some((r) => 'errors' in r)) {
      const errors = results.map((r) => ('errors' in r ? r.errors : {}));
      return { status: 400, body: many ? errors : errors[0], headers: allow };
    }
    const created = results.map((r) => store.createIp((r as { values: IpValues }).values)).map((ip) => store.ips.spec.full(ip, c));
    return { status: 201, body: many ? created : created[0], headers: allow };
  }

  async function answer(req: http.IncomingMessage, body: Buffer): Promise<Reply> {
    const raw = req.url ?? '/';
    const qi = raw.indexOf('?');
    const path = qi < 0 ? raw : raw.slice(0, qi);
    const query = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));

    const delay = Math.max(0, ...(faults.slow ?? []).filter((s) => matches(s.match, raw)).map((s) => s.delayMs));
    if (delay) await new Promise<void>((resolve) => { const t = setTimeout(() => { timers.delete(t); resolve(); }, delay); timers.add(t); });
    if (faults.fail500 && fail500Left > 0 && matches(faults.fail500.match, raw)) {
      fail500Left--;
      return {
        status: 500,
        body: {
          error: 'connection to server at "netbox-postgres" (10.10.0.5), port 5432 failed: FATAL:  sorry, too many clients already\n',
          exception: 'OperationalError', netbox_version: release.full, python_version: release.python,
        },
      };
    }

    const r = route(path);
    if (!r) {
      // APPEND_SLASH: a GET/HEAD without its trailing slash is redirected when the slashed path exists.
      if (!path.endsWith('/') && route(path + '/') && (req.method === 'GET' || req.method === 'HEAD')) {
        return { status: 301, headers: { Location: path + '/' + (qi < 0 ? '' : raw.slice(qi)) } };
      }
      return { status: 404, html: NOT_FOUND_PAGE };
    }

    // AcceptHeaderVersioning with ALLOWED_VERSIONS = [REST_FRAMEWORK_VERSION].
    const askedVersion = /(?:^|[;,\s])version\s*=\s*([^;,\s]+)/.exec(req.headers.accept ?? '')?.[1];
    if (askedVersion !== undefined && askedVersion !== version) return { status: 406, body: { detail: 'Invalid version in "Accept" header.' } };

    const who = authenticate(req.headers.authorization);
    if (typeof who === 'object') return { status: 403, body: { detail: who.fail } };
    if (who === 'anon' && loginRequired) return { status: 403, body: { detail: 'Authentication credentials were not provided.' } };
    // TokenPermissions (DRF initial(), before the handler): unsafe methods need a user and a token that may write.
    if (!['GET', 'HEAD', 'OPTIONS'].includes(req.method ?? 'GET')) {
      if (who === 'anon') return { status: 403, body: { detail: 'Authentication credentials were not provided.' } };
      if (who === 'reader') return { status: 403, body: { detail: 'You do not have permission to perform this action.' } };
    }

    const proto = String(req.headers['x-forwarded-proto'] ?? '').split(',')[0]!.trim() === 'https' ? 'https' : 'http';
    const host = String(req.headers['x-forwarded-host'] ?? req.headers.host ?? '127.0.0.1').split(',')[0]!.trim();
    const base = `${proto}://${host}`;
    const c: Ctx = { base, v: version, store, query };

    if (r.kind === 'available-ips') return availableIps(req, body, r.pk, c);
    if (r.kind === 'detail' && r.table === (store.ips as unknown as Table<Base>) && req.method === 'DELETE') {
      const headers = { Allow: 'GET, PUT, PATCH, DELETE, HEAD, OPTIONS' };
      if (!/^\d+$/.test(r.pk)) return { status: 404, body: { detail: 'Not found.' }, headers };
      const ip = store.ips.rows.get(Number(r.pk));
      if (!ip) return { status: 404, body: { detail: 'No IPAddress matches the given query.' }, headers };
      store.deleteIp(ip);
      return { status: 204, headers };
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return { status: 405, body: { detail: `Method "${req.method}" not allowed.` } };

    switch (r.kind) {
      case 'root': {
        const apps = ['circuits', 'core', 'dcim', 'extras', 'ipam', 'plugins', 'status', 'tenancy', 'users', 'virtualization', 'vpn', 'wireless'];
        return { status: 200, body: Object.fromEntries(apps.map((a) => [a, `${base}/api/${a}/`])) };
      }
      case 'status':
        return { status: 200, body: statusBody() };
      case 'list':
        return list(r.table, c, base + raw);
      case 'detail': {
        if (!/^\d+$/.test(r.pk)) return { status: 404, body: { detail: 'Not found.' } };
        const o = r.table.rows.get(Number(r.pk));
        if (!o) return { status: 404, body: { detail: `No ${r.table.spec.objectName} matches the given query.` } };
        const headers: Record<string, string> = {};
        if (since(version, '4.6')) headers.ETag = `"${o.updated.replace('Z', '+00:00')}"`;
        return { status: 200, body: renderer(r.table.spec, c)(o), headers };
      }
    }
  }

  function send(req: http.IncomingMessage, res: http.ServerResponse, reply: Reply): void {
    const headers: Record<string, string> = {
      'X-Request-ID': randomUUID(),
      'Vary': 'Accept, Cookie, Origin',
      'X-Frame-Options': 'SAMEORIGIN',
      ...reply.headers,
    };
    if ((req.url ?? '').startsWith('/api/')) headers['API-Version'] = version;
    let payload = '';
    if (reply.html !== undefined) {
      headers['Content-Type'] = 'text/html; charset=utf-8';
      payload = reply.html;
    } else if (reply.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      headers.Allow ??= 'GET, HEAD';
      payload = JSON.stringify(reply.body);
    }
    headers['Content-Length'] = String(Buffer.byteLength(payload));
    res.writeHead(reply.status, headers);
    res.end(req.method === 'HEAD' ? undefined : payload);
  }

  const server = http.createServer((req, res) => {
    const entry: NetboxSim['requests'][number] = { method: req.method ?? 'GET', path: req.url ?? '/', authorization: req.headers.authorization ?? null, at: Date.now(), body: null };
    requests.push(entry);
    const hung = faults.hang === true; // accepted and never answered; stop() destroys the socket
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('error', () => undefined);
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (body.length) entry.body = body.toString('utf8');
      if (hung) return;
      answer(req, body).then((reply) => { if (!res.destroyed) send(req, res, reply); }, (e: unknown) => {
        if (!res.destroyed) send(req, res, { status: 500, body: { error: String(e), exception: e instanceof Error ? e.name : 'Exception', netbox_version: release.full, python_version: release.python } });
      });
    });
  });
  server.on('connection', (s: Socket) => { sockets.add(s); s.once('close', () => sockets.delete(s)); });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => { server.off('error', reject); resolve(); });
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let stopped: Promise<void> | null = null;

  return {
    url,
    version,
    v1Token,
    v2Token: `nbt_${v2Key}.${v2Secret}`,
    expiredV1Token,
    expiredV2Token: `nbt_${expiredV2Key}.${expiredV2Secret}`,
    readOnlyToken: readOnlyV1Token,
    readOnlyV2Token: `nbt_${readOnlyV2Key}.${readOnlyV2Secret}`,
    requests,
    setFaults(f: NetboxFaults) {
      faults = { slow: f.slow?.map((s) => ({ ...s })), fail500: f.fail500 ? { ...f.fail500 } : undefined, hang: f.hang };
      fail500Left = f.fail500?.count ?? 0;
    },
    addDevice: (d) => store.addDevice(d),
    addPrefix: (p) => store.addPrefix(p),
    addIpAddress: (ip) => store.addIpAddress(ip),
    stop() {
      stopped ??= new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.close(() => resolve());
        server.closeAllConnections();
        for (const s of sockets) s.destroy();
      });
      return stopped;
    },
  };
}
