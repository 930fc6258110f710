/**
 * Vendor quirk flavours (issue 9 item 3), each a small set of switches the simulator obeys. They
 * reproduce field behaviour that a driver flavour must work around; "plain" is DMTF's mockup as is.
 */
export interface Flavour {
  name: FlavourName;
  /**
   * iDRAC 6.00.02+: VirtualMedia (and so InsertMedia) lives under the System, not the Manager.
   * Source: redfish-captures/bmclib/internal/redfishwrapper/fixtures/dell/manager.idrac.embedded.1.json (iDRAC 1.20.50.52: no VirtualMedia)
   * with .../dell/system.embedded.1.virtualmedia.json (it is on the System); dell/iDRAC-Redfish-Scripting issue #265 (Systems from 6.00.02).
   */
  virtualMediaOnSystem?: boolean;
  /**
   * iDRAC: InsertMedia while an image is connected fails ("already connected"): eject first.
   * Source: busterswt/busterswt.github.io _posts/2021-12-19-mounting-virtual-media-drac8.markdown (iDRAC 8: 500, IDRAC.1.6.VRM0012);
   * dell/dellemc-openmanage-ansible-modules plugins/modules/idrac_virtual_media.py (virtual_media_operation: eject, then insert).
   */
  refuseInsertWhileConnected?: boolean;
  /**
   * Supermicro: InsertMedia while Image is set fails, even if not Inserted. No public source shows the BMC itself refusing;
   * modelled on Supermicro keeping Image/ImageName after eject: ansible-collections/community.general issue #6969,
   * plugins/module_utils/_redfish_utils.py (_find_empty_virt_media_slot, "Supermicro ... do not properly clear out ImageName").
   */
  refuseInsertWhileImageSet?: boolean;
  /**
   * Supermicro: no Boot.BootSourceOverrideMode at all; a PATCH naming it is refused.
   * Source: redfish-captures/lambdalabs-redfish-exporter/internal/collector/testdata/gb300_happypath/redfish/v1/Systems/System_0/index.json
   * (Manufacturer "Supermicro": no Mode; the X12/X13 captures have one); openstack/ironic ironic/drivers/modules/redfish/management.py (set_boot_mode: HPE Gen9).
   */
  noBootSourceOverrideMode?: boolean;
  /**
   * HPE iLO: EjectMedia with nothing inserted is an error. Source: bmc-toolbox/bmclib commit 6dbf141 (PR #410, "on some HP ILOs this
   * caused failures to eject even when there was nothing to eject"); openstack/sushy sushy/resources/manager/virtual_media.py (eject_media tolerates 400/409 when nothing is inserted).
   */
  ejectFailsWhenEmpty?: boolean;
  /**
   * iLO 4: InsertMedia accepts only the Image parameter. Source: HewlettPackard/ilo-rest-api-docs source/includes/_ilo4_resourcedefns.md
   * (VirtualMedia: Inserted/WriteProtected read only, InsertVirtualMedia takes "Image"); ansible-collections/community.general issue #4595.
   */
  insertAcceptsOnlyImage?: boolean;
  /**
   * Lenovo XCC: a Continuous disk override is accepted and recorded (a real one can boot-loop UEFI);
   * the simulator notes it in state.continuousDiskOverrides so a test shows the driver used Once.
   * Source: openstack/ironic PR #14 (Hdd+Continuous boot-loops Lenovo SR645 V3 on older XCC); ironic/drivers/modules/agent.py (Lenovo UEFI, bug 2053064).
   * Note: the XCC 2.83 capture (redfish-captures/nvidia-libredfish/tests/mockups/lenovo/redfish/v1/Systems/1/index.json) allows only Once/Disabled.
   */
  recordsContinuousDiskOverride?: boolean;
  /**
   * iDRAC: the manager links DellAttributes (Links.Oem.Dell.DellAttributes) holding
   * ServerBoot.1.FirstBootDevice and VirtualMedia.1.BootOnce; VCD-DVD there boots the virtual CD.
   * A Cd boot override boots the machine's physical drive, which is empty (the boot finds no image).
   * Source: redfish-captures/nvidia-libredfish/tests/mockups/dell_multi_dpu/redfish/v1/Managers/iDRAC.Embedded.1/index.json (Links.Oem.Dell.DellAttributes);
   * openstack/sushy sushy/oem/dell/resources/manager/manager.py (IDRAC_CONFIG_CD, set_virtual_boot_device); openstack/ironic ironic/drivers/modules/drac/boot.py (_set_boot_device).
   */
  dellFirstBootDevice?: boolean;
  /**
   * HPE iLO: each slot has Oem.<vendor>.BootOnNextServerReset; set on an inserted slot, the next boot is from it (then it clears).
   * Source: redfish-captures/nvidia-libredfish/tests/mockups/hpe/redfish/v1/Managers/1/VirtualMedia/2/index.json (Oem.Hpe, iLO 5 2.72);
   * HewlettPackard/ilo-rest-api-docs source/includes/_ilo4_resourcedefns.md (/Oem/Hp/BootOnNextServerReset; it ejects on the 2nd reboot).
   */
  bootOnNextServerReset?: 'Hpe' | 'Hp';
  /**
   * Lenovo XCC: the CD slots are EXT1, EXT2, ... with no InsertMedia/EjectMedia actions; a PATCH of the slot mounts or clears an image.
   * Source: redfish-captures/nvidia-libredfish/tests/mockups/lenovo/redfish/v1/Managers/1/VirtualMedia/EXT1/index.json (no Actions);
   * openstack/sushy sushy/resources/manager/virtual_media.py (insert_media: "Lenovo SD530 ... PATCH method as opposed to InsertMedia").
   */
  patchMountSlots?: boolean;
  /**
   * Cisco CIMC blade: with more than one CD slot, InsertMedia on the first answers 405 (another slot takes the image).
   * Source: openstack/ironic ironic/drivers/modules/redfish/boot.py (_insert_vmedia_in_resource: Cisco UCSB/UCSX blades refuse
   * KVM-only slots with 400; Cisco C845A M8 answers 405; both move on to the next slot).
   */
  firstCdSlotRefuses405?: boolean;
}

export type FlavourName = 'plain' | 'idrac' | 'supermicro' | 'ilo' | 'ilo4' | 'xcc' | 'cimc';

export const idrac: Flavour = { name: 'idrac', virtualMediaOnSystem: true, refuseInsertWhileConnected: true, dellFirstBootDevice: true };
export const supermicro: Flavour = { name: 'supermicro', noBootSourceOverrideMode: true, refuseInsertWhileImageSet: true };
export const ilo: Flavour = { name: 'ilo', ejectFailsWhenEmpty: true, bootOnNextServerReset: 'Hpe' };
export const ilo4: Flavour = { name: 'ilo4', ejectFailsWhenEmpty: true, insertAcceptsOnlyImage: true, bootOnNextServerReset: 'Hp' };
export const xcc: Flavour = { name: 'xcc', recordsContinuousDiskOverride: true, patchMountSlots: true };
export const cimc: Flavour = { name: 'cimc', firstCdSlotRefuses405: true };
export const plain: Flavour = { name: 'plain' };

export const FLAVOURS: Record<FlavourName, Flavour> = { plain, idrac, supermicro, ilo, ilo4, xcc, cimc };
